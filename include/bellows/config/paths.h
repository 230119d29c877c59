// The one rule for paths in a config (docs/training.md, "Paths in a config"): a relative path is relative to the
// directory of the file that set it; a value from the command line, a default or a text without a file (the
// embedded demo) is relative to the working directory. Validation applies it to every key declared file_path()
// (schema.h); the messages here say which place a path was looked for and why.
#pragma once

#include <filesystem>
#include <string>

#include "bellows/config/config.h"  // defines: Config, Origin
#include "bellows/util/error.h"     // defines: ErrorKind

namespace bellows::config {

// Where a relative path set at `origin` starts, and the rule in words: "the directory of run.yaml (/a/b)" or "the
// working directory (/x)".
struct PathBase {
  std::filesystem::path dir;  // absolute
  std::string rule;
};
PathBase path_base(const Origin& origin);

// `written` made absolute by the rule (an absolute path stays as it is), lexically normal.
std::filesystem::path resolve_path(const std::string& written, const Origin& origin);

// Raises a `kind` error where `path` (the file or folder `key` names, as validation resolved it) does not exist:
// "run.yaml:3:9: data.path 'data/x.npy' does not exist: looked for /a/b/data/x.npy (relative to the directory of
// run.yaml, /a/b)". `hint` says what the key takes; the rule is added to it.
void check_path_exists(const Config& config, const std::string& key, const std::filesystem::path& path, ErrorKind kind,
                       const std::string& hint);

}  // namespace bellows::config
