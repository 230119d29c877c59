// The configuration tree: dotted-key access, deep merge with origins, command-line overrides and the sorted
// YAML printout. Loading files and composing them lives in load.cpp; checking against a schema in schema.cpp.
//
// yaml-cpp nodes are handles with reference semantics: assigning one Node variable to another rebinds the
// *tree* node, not the variable. So walks below rebind with reset() and values are stored as Clone()s.
#include "bellows/config/config.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>

#include "bellows/util/check.h"
#include "bellows/util/suggest.h"
#include "config/internal.h"
#include "config/scalar.h"

namespace bellows::config {
namespace {

constexpr const char* kDefaultNote = "schema default";

// The node at `parts` below `root`, or an undefined node; never modifies the tree.
YAML::Node find(const YAML::Node& root, const std::vector<std::string>& parts) {
  YAML::Node current;
  current.reset(root);
  for (const auto& part : parts) {
    if (!current.IsMap()) return YAML::Node(YAML::NodeType::Undefined);
    const YAML::Node& as_const = current;
    YAML::Node next = as_const[part];
    if (!next.IsDefined()) return YAML::Node(YAML::NodeType::Undefined);
    current.reset(next);
  }
  return current;
}

std::vector<std::string> sorted_keys(const YAML::Node& map) {
  std::vector<std::string> keys;
  for (const auto& entry : map) keys.push_back(entry.first.Scalar());
  std::sort(keys.begin(), keys.end());
  return keys;
}

void collect_leaves(const YAML::Node& node, const std::string& prefix, std::vector<std::string>& out) {
  if (!node.IsMap() || node.size() == 0) {
    if (!prefix.empty()) out.push_back(prefix);
    return;
  }
  for (const auto& entry : node) collect_leaves(entry.second, detail::join_key(prefix, entry.first.Scalar()), out);
}

// Text that yaml-cpp reads back as null; a string with this text must be quoted to stay a string.
bool looks_null(const std::string& s) {
  return s.empty() || s == "~" || s == "null" || s == "Null" || s == "NULL";
}

// Whether `text` written as yaml-cpp writes a plain scalar reads back as the same text. Not so for a trailing
// carriage return (a value from a file saved with Windows line endings), other control characters, or leading and
// trailing blanks, which the emitter leaves unquoted; asking the parser covers every such case, not a list of them.
// Asked in a block map's context, as to_yaml writes it (on its own, yaml-cpp quotes some strings it leaves plain there).
bool reads_back_plain(const std::string& text, bool as_key = false) {
  YAML::Emitter probe;
  // A second entry follows, as in a config: a carriage return at the very end of the text would survive, before a line
  // break it does not.
  probe << YAML::BeginMap << YAML::Key << (as_key ? text : std::string("k")) << YAML::Value << (as_key ? std::string("v") : text)
        << YAML::Key << "~next" << YAML::Value << "v" << YAML::EndMap;
  if (!probe.good()) return false;
  try {
    const YAML::Node back = YAML::Load(probe.c_str());
    if (!back.IsMap() || back.size() != 2) return false;
    const auto entry = *back.begin();
    return as_key ? entry.first.Scalar() == text : entry.second.IsScalar() && entry.second.Scalar() == text;
  } catch (const YAML::Exception&) {
    return false;
  }
}

void emit(YAML::Emitter& out, const YAML::Node& node) {
  switch (node.Type()) {
    case YAML::NodeType::Scalar:
      if (detail::is_forced_string(node) || looks_null(node.Scalar()) || !reads_back_plain(node.Scalar())) out << YAML::DoubleQuoted;
      out << node.Scalar();
      return;
    case YAML::NodeType::Sequence: {
      const bool all_scalars =
          std::all_of(node.begin(), node.end(), [](const YAML::Node& e) { return !e.IsMap() && !e.IsSequence(); });
      if (all_scalars) out << YAML::Flow;
      out << YAML::BeginSeq;
      for (const auto& element : node) emit(out, element);
      out << YAML::EndSeq;
      return;
    }
    case YAML::NodeType::Map: {
      if (node.size() == 0) out << YAML::Flow;
      out << YAML::BeginMap;
      const YAML::Node& as_const = node;
      for (const auto& key : sorted_keys(node)) {
        out << YAML::Key;
        if (!reads_back_plain(key, /*as_key=*/true)) out << YAML::DoubleQuoted;
        out << key << YAML::Value;
        emit(out, as_const[key]);
      }
      out << YAML::EndMap;
      return;
    }
    default: out << YAML::Null; return;
  }
}

void record_origins(const YAML::Node& value, const std::string& key, const Origin& origin,
                    std::map<std::string, Origin>& origins) {
  origins[key] = origin;
  if (!value.IsMap()) return;
  for (const auto& entry : value) {
    record_origins(entry.second, detail::join_key(key, entry.first.Scalar()), origin, origins);
  }
}

}  // namespace

std::string Origin::str() const {
  if (file.empty()) return note.empty() ? std::string("unknown origin") : note;
  std::string text = file;
  if (line > 0) text += fmt::format(":{}", line);
  if (line > 0 && column > 0) text += fmt::format(":{}", column);
  return text;
}

Config::Config() : root_(YAML::NodeType::Map) {}

Config::Config(const Config& other)
    : root_(YAML::Clone(other.root_)),
      origins_(other.origins_),
      name_(other.name_),
      sources_(other.sources_),
      profile_(other.profile_),
      plan_notes_(other.plan_notes_) {}

Config& Config::operator=(const Config& other) {
  if (this != &other) {
    root_.reset(YAML::Clone(other.root_));  // reset() rebinds this handle; operator= would rewrite the old tree
    origins_ = other.origins_;
    name_ = other.name_;
    sources_ = other.sources_;
    profile_ = other.profile_;
    plan_notes_ = other.plan_notes_;
  }
  return *this;
}

Config::Config(Config&& other) noexcept
    : root_(other.root_),
      origins_(std::move(other.origins_)),
      name_(std::move(other.name_)),
      sources_(std::move(other.sources_)),
      profile_(std::move(other.profile_)),
      plan_notes_(std::move(other.plan_notes_)) {
  other.root_.reset(YAML::Node());  // detach the moved-from config (an empty handle: allocates nothing)
}

Config& Config::operator=(Config&& other) noexcept {
  if (this != &other) {
    root_.reset(other.root_);
    other.root_.reset(YAML::Node());
    origins_ = std::move(other.origins_);
    name_ = std::move(other.name_);
    sources_ = std::move(other.sources_);
    profile_ = std::move(other.profile_);
    plan_notes_ = std::move(other.plan_notes_);
  }
  return *this;
}

// The map that will hold the last part of `key`, creating missing (or null) parents as maps.
YAML::Node Config::parent_map_for(const std::vector<std::string>& parts, const std::string& key, const Origin& origin) {
  if (!root_.IsMap()) root_.reset(YAML::Node(YAML::NodeType::Map));  // a moved-from config holds no tree
  YAML::Node current;
  current.reset(root_);
  std::string prefix;
  for (std::size_t i = 0; i + 1 < parts.size(); ++i) {
    prefix = detail::join_key(prefix, parts[i]);
    const YAML::Node& as_const = current;
    YAML::Node child = as_const[parts[i]];
    if (child.IsDefined() && !child.IsNull() && !child.IsMap()) {
      BELLOWS_FAIL(ErrorKind::kConfig,
                   fmt::format("{}: cannot set '{}': its parent '{}' holds {} (set at {}), not a mapping", origin.str(),
                               key, prefix, detail::describe(child), this->origin(prefix).str()),
                   fmt::format("set '{}' itself, or replace '{}' with a mapping", prefix, prefix));
    }
    if (!child.IsDefined() || !child.IsMap()) {
      current[parts[i]] = YAML::Node(YAML::NodeType::Map);
      origins_[prefix] = origin;
      const YAML::Node created = as_const[parts[i]];  // `child` may be a dangling lookup: never reset() it
      current.reset(created);
    } else {
      current.reset(child);
    }
  }
  return current;
}

void Config::erase_origins(const std::string& key) {
  origins_.erase(key);
  const std::string below = key + '.';
  auto it = origins_.lower_bound(below);
  while (it != origins_.end() && it->first.starts_with(below)) it = origins_.erase(it);
}

void Config::set(const std::string& key, const YAML::Node& value, const Origin& origin) {
  const auto parts = detail::split_key(key);
  BELLOWS_CHECK_CONFIG(!parts.empty(), fmt::format("{}: '{}' is not a valid key", origin.str(), key),
                       "keys are names separated by single dots, like optim.lr");
  BELLOWS_CHECK(value.IsDefined(), fmt::format("setting '{}' to an undefined YAML node", key),
                "pass a value (YAML::Node(YAML::NodeType::Null) for null)");
  YAML::Node parent = parent_map_for(parts, key, origin);
  YAML::Node copy = YAML::Clone(value);
  detail::shorten_code_doubles(copy);
  parent[parts.back()] = copy;
  erase_origins(key);
  record_origins(copy, key, origin, origins_);
}

void Config::erase(const std::string& key) {
  const auto parts = detail::split_key(key);
  if (parts.empty()) return;
  YAML::Node parent = find(root_, {parts.begin(), parts.end() - 1});
  if (!parent.IsMap()) return;
  parent.remove(parts.back());
  erase_origins(key);
}

void Config::set_default(const std::string& key, const YAML::Node& value) {
  const auto parts = detail::split_key(key);
  // An ancestor holding a scalar blocks the default; validation reports the ancestor, so stay quiet here.
  for (std::size_t n = 1; n < parts.size(); ++n) {
    const YAML::Node ancestor = find(root_, {parts.begin(), parts.begin() + static_cast<std::ptrdiff_t>(n)});
    if (ancestor.IsDefined() && !ancestor.IsNull() && !ancestor.IsMap()) return;
  }
  if (has(key)) return;
  set(key, value, Origin::noted(kDefaultNote));
}

void Config::replace(const std::string& key, const YAML::Node& value, const Config& from) {
  const auto parts = detail::split_key(key);
  YAML::Node parent = parent_map_for(parts, key, from.origin(key));
  parent[parts.back()] = YAML::Clone(value);
  erase_origins(key);
  if (const auto it = from.origins_.find(key); it != from.origins_.end()) origins_[key] = it->second;
  const std::string below = key + '.';
  for (auto it = from.origins_.lower_bound(below); it != from.origins_.end() && it->first.starts_with(below); ++it) {
    origins_[it->first] = it->second;
  }
}

// Every key inside a value given on the command line (a YAML map, at any depth) is a name, as in a config file:
// an empty, null or non-scalar key would become a node no key path reaches (found by fuzzing: printing such a
// config threw yaml-cpp's InvalidNode), and a dotted one would print as a config that does not load again.
namespace {
void check_value_keys(const YAML::Node& value, const std::string& key, const Origin& origin) {
  if (value.IsSequence()) {
    for (const auto& element : value) check_value_keys(element, key, origin);
    return;
  }
  if (!value.IsMap()) return;
  for (const auto& entry : value) {
    BELLOWS_CHECK_CONFIG(entry.first.IsScalar() && !entry.first.Scalar().empty() && entry.first.Scalar().find('.') == std::string::npos,
                         fmt::format("{}: the value of '{}' holds a key that is not a name ({})", origin.str(), key,
                                     entry.first.IsScalar() ? "'" + entry.first.Scalar() + "'" : std::string("a list or map")),
                         "keys are names like optim or lr; write nested keys as optim.lr=3e-4 or optim={lr: 3e-4}");
    check_value_keys(entry.second, key + "." + entry.first.Scalar(), origin);
  }
}
}  // namespace

void Config::merge_map(const YAML::Node& from_map, const std::string& prefix, const Config& from) {
  for (const auto& entry : from_map) {
    // A value given as a YAML map ('optim={: 3}', or '--lr=: 3') can hold an empty or non-scalar key: no key
    // to set (found by fuzzing: merging it indexed an empty key path).
    const std::string key = detail::join_key(prefix, entry.first.IsScalar() ? entry.first.Scalar() : std::string());
    BELLOWS_CHECK_CONFIG(entry.first.IsScalar() && !detail::split_key(key).empty(),
                         fmt::format("{}: a key under '{}' is {}", from.origin(prefix).str(), prefix.empty() ? "the top level" : prefix,
                                     entry.first.IsScalar() ? fmt::format("'{}', not a name", entry.first.Scalar()) : std::string("not a name")),
                         "keys are names like optim or lr; write nested keys as optim.lr=3e-4 or optim: {lr: 3e-4}");
    const YAML::Node mine = find(root_, detail::split_key(key));
    if (entry.second.IsMap() && mine.IsMap()) {
      merge_map(entry.second, key, from);  // maps merge key by key; this map keeps its first origin
    } else {
      replace(key, entry.second, from);
    }
  }
}

void Config::merge(const Config& over) {
  merge_map(over.root_, "", over);
  for (const auto& source : over.sources_) {
    if (std::find(sources_.begin(), sources_.end(), source) == sources_.end()) sources_.push_back(source);
  }
}

void Config::compose_profile_below(const Config& profile, ProfileChoice choice) {
  Config composed = profile;
  composed.merge(*this);  // this config's keys over the profile's; its sources after the profile's
  composed.name_ = name_;
  composed.plan_notes_ = plan_notes_;  // how this config was composed (the embedded demo's model) still holds
  composed.profile_ = std::move(choice);
  *this = std::move(composed);
}

bool is_profile_path(const std::string& value) {
  const auto ends_with = [&](const std::string& suffix) {
    return value.size() >= suffix.size() && value.compare(value.size() - suffix.size(), suffix.size(), suffix) == 0;
  };
  return value.find('/') != std::string::npos || ends_with(".yaml") || ends_with(".yml");
}

bool Config::has(const std::string& key) const {
  const auto parts = detail::split_key(key);
  return !parts.empty() && find(root_, parts).IsDefined();
}

YAML::Node Config::node(const std::string& key) const {
  const auto parts = detail::split_key(key);
  if (parts.empty()) return YAML::Node(YAML::NodeType::Undefined);
  const YAML::Node found = find(root_, parts);
  return found.IsDefined() ? YAML::Clone(found) : YAML::Node(YAML::NodeType::Undefined);
}

bool Config::is_schema_default(const std::string& key) const {
  const auto it = origins_.find(key);
  return has(key) && it != origins_.end() && it->second.file.empty() && it->second.note == kDefaultNote;
}

const Origin& Config::origin(const std::string& key) const {
  static const Origin unknown = Origin::noted("unknown origin");
  std::string k = key;
  while (!k.empty()) {
    if (const auto it = origins_.find(k); it != origins_.end()) return it->second;
    const auto dot = k.rfind('.');
    if (dot == std::string::npos) break;
    k.resize(dot);
  }
  return unknown;
}

std::vector<std::string> Config::leaf_keys() const {
  std::vector<std::string> keys;
  collect_leaves(root_, "", keys);
  std::sort(keys.begin(), keys.end());
  return keys;
}

std::string Config::to_yaml() const {
  YAML::Emitter out;
  emit(out, root_);
  BELLOWS_CHECK(out.good(), fmt::format("cannot print the configuration as YAML: {}", out.GetLastError()), "");
  return std::string(out.c_str()) + "\n";
}

// --- command-line overrides ---

void Config::apply_value(const std::string& key, const std::string& value_text, const Origin& origin) {
  const auto parts = detail::split_key(key);
  BELLOWS_CHECK_USAGE(!parts.empty(), fmt::format("{}: '{}' is not a valid key", origin.str(), key),
                      "write key=value with a dotted key, like optim.lr=3e-4");
  BELLOWS_CHECK_CONFIG(parts.size() > 1 || key != kExperimentKey,
                       fmt::format("{}: '{}' names a file to compose and can only be set in a config file", origin.str(), key),
                       fmt::format("write '{}: FILE' in the run config", key));
  // `hardware_profile=NAME` is taken by the run's loading (app/profiles.h) before the file is composed.
  BELLOWS_CHECK_CONFIG(parts.size() > 1 || key != kHardwareProfileKey,
                       fmt::format("{}: '{}' is chosen when the config is loaded, before overrides apply", origin.str(), key),
                       "give it to bellows train/plan/doctor/config show as hardware_profile=NAME (or --hardware-profile NAME)");
  YAML::Node value;
  try {
    value = YAML::Load(value_text);
  } catch (const YAML::Exception& e) {
    BELLOWS_FAIL(ErrorKind::kConfig,
                 fmt::format("{}: the value of '{}' is not valid YAML: {}", origin.str(), key, e.msg),
                 "quote the value for the shell, e.g. 'data.tags=[a, b]'");
  }
  check_value_keys(value, key, origin);  // before anything changes: a failed override leaves the config as it was
  // A layer of its own, merged like any other: a map value deep-merges, anything else replaces. The
  // parent check comes first because merging would silently replace a scalar parent with a map.
  parent_map_for(parts, key, origin);
  Config layer;
  layer.set(key, value, origin);
  merge(layer);
}

void Config::apply_override(const std::string& assignment) {
  const auto eq = assignment.find('=');
  BELLOWS_CHECK_USAGE(eq != std::string::npos && eq > 0,
                      fmt::format("command line '{}': expected key=value", assignment),
                      "write overrides as dotted.key=value, like optim.lr=3e-4");
  apply_value(assignment.substr(0, eq), assignment.substr(eq + 1),
              Origin::noted(fmt::format("command line '{}'", assignment)));
}

void Config::apply_arguments(const std::vector<std::string>& args, const std::map<std::string, std::string>& aliases) {
  std::vector<std::string> flags;
  for (const auto& [flag, key] : aliases) flags.push_back(flag);
  for (std::size_t i = 0; i < args.size(); ++i) {
    const std::string& arg = args[i];
    if (!arg.starts_with("-")) {
      apply_override(arg);  // key=value, or a kUsage error saying so
      continue;
    }
    const auto eq = arg.find('=');
    const std::string flag = arg.substr(0, eq);
    const auto alias = aliases.find(flag);
    if (alias == aliases.end()) {
      const auto suggestion = closest_match(flag, flags);
      BELLOWS_FAIL(ErrorKind::kUsage,
                   fmt::format("unknown option '{}'{}", flag,
                               suggestion ? fmt::format("; did you mean '{}'?", *suggestion) : std::string()),
                   flags.empty() ? "set keys as key=value" : fmt::format("known options: {}", fmt::join(flags, ", ")));
    }
    if (eq != std::string::npos) {
      apply_value(alias->second, arg.substr(eq + 1), Origin::noted(fmt::format("command line '{}'", arg)));
      continue;
    }
    BELLOWS_CHECK_USAGE(i + 1 < args.size(), fmt::format("option '{}' needs a value", flag),
                        fmt::format("write '{} VALUE' or '{}=VALUE'", flag, flag));
    const std::string& value = args[++i];
    apply_value(alias->second, value, Origin::noted(fmt::format("command line '{} {}'", flag, value)));
  }
}

}  // namespace bellows::config
