// Glob patterns over a model's block names (`checkpointing:`, `dist.fsdp_units`): which names they select, in the
// names' order. Here, below models/ and dist/, so that both select blocks with the same rule and the same error.
#pragma once

#include <string>
#include <vector>

namespace bellows {

// The names of `names` that the glob patterns select (fnmatch without FNM_PATHNAME: `*` and `?` also match dots), in
// the order of `names`, each once. A pattern that selects nothing is a kConfig error naming `key` (the config key the
// patterns come from) and listing the names there are ("this model has no checkpointable blocks" where there are none).
std::vector<std::string> select_names(const std::vector<std::string>& patterns, const std::vector<std::string>& names,
                                      const std::string& key);

}  // namespace bellows
