// Names chosen by shell-style patterns (fnmatch: "encoder.layers.*"): the blocks that activation checkpointing
// (checkpointing: [...]) and fsdp's units (dist.fsdp_units) select. Here, at the bottom, so models/ and dist/ share it.
#pragma once

#include <string>
#include <vector>

namespace bellows {

// The `names` that any of `patterns` matches, in the order of `names`. A pattern that matches none is a kConfig
// error naming `key`, the pattern and every name.
std::vector<std::string> select_names(const std::vector<std::string>& patterns, const std::vector<std::string>& names,
                                      const std::string& key);

}  // namespace bellows
