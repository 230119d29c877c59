// A configuration tree loaded from YAML, composed from several files and command-line overrides, in which
// every value remembers where it came from (file:line:column, or the override argument), so that every
// error can point at its origin. Validation and typed access go through a Schema (schema.h).
#pragma once

#include <yaml-cpp/yaml.h>

#include <filesystem>
#include <map>
#include <string>
#include <vector>

namespace bellows::config {

// Where a value was set: "runs/a.yaml:12:5", "command line: optim.lr=3e-4", "default".
struct Origin {
  std::string file;  // empty for command-line values and defaults
  int line = 0;      // 1-based; 0 when unknown
  int column = 0;
  std::string note;  // "command line: key=value", "default", ...
  std::string str() const;
};

class Config {
 public:
  Config();

  // Loads `path` and the files it names: a top-level `experiment: FILE` and `hardware_profile: FILE`
  // (paths relative to the naming file) are loaded first and deep-merged in the order
  // experiment < hardware_profile < the file's own keys. Maps merge key by key; lists and scalars replace.
  // Missing or unparsable files and include cycles raise kConfig errors naming the file (and line).
  static Config load(const std::filesystem::path& path);
  // Parses YAML text as if it came from `name` (for the embedded default and tests).
  static Config parse(const std::string& yaml_text, const std::string& name);

  // Applies "a.b.c=value" (value parsed as a YAML scalar or flow sequence/map) over the tree.
  void apply_override(const std::string& assignment);
  // Splits argv-style arguments: "key=value" overrides and alias flags ("--batch-size 64",
  // "--batch-size=64", "--lr=1e-3") mapped to keys through `aliases` (flag -> dotted key).
  // Anything else raises a kUsage error with the closest known flag suggested.
  void apply_arguments(const std::vector<std::string>& args, const std::map<std::string, std::string>& aliases);

  // Sets a value when the key is absent (schema defaults); origin "default".
  void set_default(const std::string& key, const YAML::Node& value);
  void set(const std::string& key, const YAML::Node& value, const Origin& origin);

  bool has(const std::string& key) const;
  YAML::Node node(const std::string& key) const;  // an undefined node when absent
  const Origin& origin(const std::string& key) const;
  std::vector<std::string> leaf_keys() const;      // dotted keys of all scalar/sequence leaves, sorted

  const YAML::Node& root() const { return root_; }
  std::string to_yaml() const;  // the resolved tree, keys sorted, for `bellows config show` and run dirs

 private:
  YAML::Node root_;
  std::map<std::string, Origin> origins_;  // dotted key -> origin of that leaf
};

}  // namespace bellows::config
