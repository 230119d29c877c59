// A configuration tree loaded from YAML, composed from several files and command-line overrides, in which
// every value remembers where it came from (file:line:column, or the override argument), so that every
// error can point at its origin. Validation and typed access go through a Schema (schema.h).
#pragma once

#include <yaml-cpp/yaml.h>

#include <filesystem>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace bellows::config {

// Where a value was set: "runs/a.yaml:12:5", "command line 'optim.lr=3e-4'", "schema default".
// For a key read from a file, the position is that of the key itself (where the reader looks for it),
// 1-based like an editor's.
struct Origin {
  std::string file;         // empty for command-line values and defaults
  int line = 0;             // 1-based; 0 when unknown
  int column = 0;           // 1-based; 0 when unknown
  std::string note;         // "command line 'key=value'", "schema default", ...
  // A file key's value as written, where validation made it absolute (Schema's file_path(), config/paths.h); else "".
  std::string written_path;
  std::string str() const;  // "file:line:column", or the note when there is no file

  static Origin in_file(std::string file, int line = 0, int column = 0) {
    return Origin{std::move(file), line, column, {}, {}};
  }
  static Origin noted(std::string note) { return Origin{{}, 0, 0, std::move(note), {}}; }
};

// The top-level keys that name files to compose rather than values. They are consumed by composition and
// never remain in the tree (so validation and to_yaml() never see them); sources() records the files.
inline constexpr const char* kExperimentKey = "experiment";
inline constexpr const char* kHardwareProfileKey = "hardware_profile";

// How `hardware_profile:` values are found (app/profiles.h): the name of a shipped profile, "auto" (chosen from
// the hardware) or "none". Returns the profile's file, an empty path for none, or nullopt to read `value` as a
// file path relative to the naming file; raises a kConfig error for an unknown name. Without a resolver,
// `hardware_profile:` must name a file.
using ProfileResolver = std::function<std::optional<std::filesystem::path>(const std::string& value, const Origin& where)>;

// A value of `hardware_profile:` that names a file rather than a profile: it contains '/' or ends in .yaml/.yml.
bool is_profile_path(const std::string& value);

// The hardware profile a config composed.
struct ProfileChoice {
  std::string value;           // as written: a name, auto, none, or a path
  Origin origin;               // where it was written
  std::filesystem::path file;  // the file composed; empty for none
};

class Config {
 public:
  Config();
  // Copies are deep and independent. (A YAML::Node is a shared handle, and its operator= rewrites the node it
  // refers to, so the defaulted members would make copies share, and assignments clobber, one tree.)
  Config(const Config& other);
  Config& operator=(const Config& other);
  Config(Config&& other) noexcept;
  Config& operator=(Config&& other) noexcept;
  ~Config() = default;

  // Loads `path` and the files it names: a top-level `experiment: FILE` and `hardware_profile: FILE`
  // (paths relative to the naming file) are loaded first and deep-merged in the order
  // experiment < hardware_profile < the file's own keys. Maps merge key by key; lists and scalars replace.
  // Included files may name further files (each composed the same way). Missing or unparsable files,
  // include cycles, duplicate keys and keys containing '.' raise kConfig errors naming the file (and line,
  // and for a missing include the file:line that named it).
  // A value of `hardware_profile:` that is not a path goes through `profiles`.
  static Config load(const std::filesystem::path& path, const ProfileResolver& profiles = {});
  // Parses YAML text as if it came from `name` (for the embedded default and tests). Composition works as in
  // load(), with included paths relative to the directory part of `name`.
  static Config parse(const std::string& yaml_text, const std::string& name, const ProfileResolver& profiles = {});

  // The hardware profile composed by `hardware_profile:` (the outermost file's, else an included file's); none
  // when no file named one.
  const std::optional<ProfileChoice>& hardware_profile() const { return profile_; }
  // Composes `profile` below every key of this config (for a profile no file named: the default `auto`, or the
  // command line's), and records the choice.
  void compose_profile_below(const Config& profile, ProfileChoice choice);
  // Records who chose the composed profile (the command line, over a file's `hardware_profile:`).
  void record_hardware_profile(ProfileChoice choice) { profile_ = std::move(choice); }
  // Rows for a run's plan table from how the config was composed (a tuned plan's settings: app/tune.h).
  struct PlanNote {
    std::string key, value, reason;
  };
  void add_plan_note(PlanNote note) { plan_notes_.push_back(std::move(note)); }
  const std::vector<PlanNote>& plan_notes() const { return plan_notes_; }

  // Applies "a.b.c=value" (value parsed as YAML: a scalar, a flow sequence or a flow map) over the tree, as
  // the topmost layer: a map value deep-merges into an existing map, anything else replaces. Setting a key
  // below an existing scalar or list ("optim.lr.x=1" when optim.lr is 0.1) is a kConfig error naming the
  // key; so is a value that is not valid YAML, or an attempt to set `experiment`/`hardware_profile`.
  // An argument without '=' or with an empty key part is a kUsage error.
  void apply_override(const std::string& assignment);
  // Splits argv-style arguments: "key=value" overrides and alias flags ("--batch-size 64",
  // "--batch-size=64", "--lr=1e-3") mapped to keys through `aliases` (flag -> dotted key).
  // Anything else raises a kUsage error with the closest known flag suggested.
  void apply_arguments(const std::vector<std::string>& args, const std::map<std::string, std::string>& aliases);

  // Sets a value when the key is absent (schema defaults); origin "schema default". Does nothing when an
  // ancestor of the key holds a scalar or list: validation reports that ancestor instead.
  void set_default(const std::string& key, const YAML::Node& value);
  // Sets (replaces) the value at a dotted key, creating missing parent maps. A parent that holds a scalar
  // or a list is a kConfig error naming the key.
  void set(const std::string& key, const YAML::Node& value, const Origin& origin);
  // Removes the value at a dotted key (and everything below it); nothing when it is absent.
  void erase(const std::string& key);
  // Deep-merges `over` onto this tree: maps merge key by key, anything else replaces; origins follow.
  void merge(const Config& over);

  bool has(const std::string& key) const;
  // Whether the key holds its schema default (set_default put it there; nothing set it since).
  bool is_schema_default(const std::string& key) const;
  YAML::Node node(const std::string& key) const;       // a copy of the value; an undefined node when absent
  const Origin& origin(const std::string& key) const;  // of the key, else of its nearest recorded ancestor
  std::vector<std::string> leaf_keys() const;  // dotted keys of all scalar/null/sequence/empty-map leaves, sorted

  const YAML::Node& root() const { return root_; }  // read-only: YAML::Clone() it before changing anything
  std::string to_yaml() const;  // the resolved tree, keys sorted, for `bellows config show` and run dirs

  // The name of the loaded file (or the name given to parse()); "" for a Config built in code.
  const std::string& name() const { return name_; }
  // Every file composed into this config, in merge order (included files first, the named file last).
  const std::vector<std::string>& sources() const { return sources_; }

 private:
  YAML::Node parent_map_for(const std::vector<std::string>& parts, const std::string& key, const Origin& origin);
  void replace(const std::string& key, const YAML::Node& value, const Config& from);
  void merge_map(const YAML::Node& from_map, const std::string& prefix, const Config& from);
  void erase_origins(const std::string& key);
  void apply_value(const std::string& key, const std::string& value_text, const Origin& origin);

  YAML::Node root_;
  std::map<std::string, Origin> origins_;  // dotted key -> origin of that key (leaves and maps)
  std::string name_;
  std::vector<std::string> sources_;
  std::optional<ProfileChoice> profile_;
  std::vector<PlanNote> plan_notes_;
};

}  // namespace bellows::config
