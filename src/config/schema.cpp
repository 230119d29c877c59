// Schema declaration, validation (every problem collected, then one kConfig error) and typed getters.
// Every message starts with the origin of the value it is about, so that an editor or a reader can jump there.
#include "bellows/config/schema.h"
#include "bellows/config/binding.h"  // defines: detail::word_index

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cctype>
#include <filesystem>
#include <set>
#include <string_view>

#include "bellows/config/paths.h"  // defines: resolve_path
#include "bellows/util/check.h"
#include "bellows/util/suggest.h"
#include "config/internal.h"
#include "config/scalar.h"

namespace bellows::config {
namespace {

using detail::ScalarKind;

const char* type_name(Type type) {
  switch (type) {
    case Type::kBool: return "a boolean (true or false)";
    case Type::kInt: return "an integer";
    case Type::kDouble: return "a number";
    case Type::kString: return "a string";
    case Type::kStringList: return "a list of strings";
    case Type::kIntList: return "a list of integers";
    case Type::kDoubleList: return "a list of numbers";
  }
  return "a value";
}

bool is_list(Type type) {
  return type == Type::kStringList || type == Type::kIntList || type == Type::kDoubleList;
}

Type element_type(Type type) {
  switch (type) {
    case Type::kStringList: return Type::kString;
    case Type::kIntList: return Type::kInt;
    case Type::kDoubleList: return Type::kDouble;
    default: return type;
  }
}

// Whether a scalar node has the (non-list) type.
bool scalar_has_type(const YAML::Node& node, Type type) {
  switch (type) {
    case Type::kBool: return detail::as_bool(node).has_value();
    case Type::kInt: return detail::as_int(node).has_value();
    case Type::kDouble: return detail::as_double(node).has_value();
    case Type::kString: return node.IsDefined() && node.IsScalar();
    default: return false;
  }
}

// Why a value does not have the type, or "" when it has.
std::string type_problem(const std::string& key, const YAML::Node& node, Type type) {
  if (!is_list(type)) {
    if (scalar_has_type(node, type)) return {};
    if (type == Type::kInt && detail::classify(node) == ScalarKind::kInt) {
      return fmt::format("'{}' expects an integer that fits in 64 bits, got {}", key, detail::describe(node));
    }
    return fmt::format("'{}' expects {}, got {}", key, type_name(type), detail::describe(node));
  }
  // A single string stands for a one-element list of strings (`train.freeze: "encoder.*"`, `checkpointing: auto`).
  if (type == Type::kStringList && node.IsDefined() && node.IsScalar()) return {};
  if (!node.IsSequence()) return fmt::format("'{}' expects {}, got {}", key, type_name(type), detail::describe(node));
  std::size_t index = 0;
  for (const auto& element : node) {
    if (!scalar_has_type(element, element_type(type))) {
      return fmt::format("'{}' expects {}, but element {} is {}", key, type_name(type), index,
                         detail::describe(element));
    }
    ++index;
  }
  return {};
}

// "in [0, 1]", ">= 0", "<= 1": the bounds of a number key (one that has some).
std::string bounds_text(const KeySpec& spec) {
  if (spec.min && spec.max) return fmt::format("in [{}, {}]", *spec.min, *spec.max);
  if (spec.min) return fmt::format(">= {}", *spec.min);
  return fmt::format("<= {}", *spec.max);
}

std::string range_text(const KeySpec& spec) {
  return "a value " + bounds_text(spec);
}

// Range and choice problems of one (well-typed, scalar) value; `what` names it ("'a'", "'a' element 2").
void check_limits(const KeySpec& spec, const YAML::Node& value, const std::string& what,
                  std::vector<std::string>& out) {
  const Type type = element_type(spec.type);
  if ((type == Type::kInt || type == Type::kDouble) && (spec.min || spec.max)) {
    const double v = *detail::as_double(value);
    if ((spec.min && !(v >= *spec.min)) || (spec.max && !(v <= *spec.max))) {
      out.push_back(fmt::format("{} is out of range: expected {}, got {}", what, range_text(spec), value.Scalar()));
    }
  }
  if (type == Type::kString && !spec.choices.empty() &&
      std::find(spec.choices.begin(), spec.choices.end(), value.Scalar()) == spec.choices.end()) {
    const auto suggestion = closest_match(value.Scalar(), spec.choices);
    out.push_back(fmt::format("{} must be one of [{}], got {}{}", what, fmt::join(spec.choices, ", "),
                              detail::describe(value),
                              suggestion ? fmt::format("; did you mean '{}'?", *suggestion) : std::string()));
  }
}

// All problems of one value against its spec, without the origin.
std::vector<std::string> value_problems(const KeySpec& spec, const YAML::Node& node) {
  std::vector<std::string> out;
  if (!spec.words.empty() && node.IsDefined() && node.IsScalar() &&
      std::find(spec.words.begin(), spec.words.end(), node.Scalar()) != spec.words.end()) {
    return out;  // a word the number key also takes
  }
  if (std::string problem = type_problem(spec.key, node, spec.type); !problem.empty()) {
    if (!spec.words.empty()) problem += fmt::format(" (or one of: {})", fmt::join(spec.words, ", "));
    out.push_back(std::move(problem));
    return out;
  }
  if (!is_list(spec.type) || node.IsScalar()) {
    check_limits(spec, node, fmt::format("'{}'", spec.key), out);
    return out;
  }
  std::size_t index = 0;
  for (const auto& element : node) check_limits(spec, element, fmt::format("'{}' element {}", spec.key, index++), out);
  return out;
}

// --- empty values ---

// What an empty value (null) stands for, where the key can be empty; see schema.h.
enum class Emptied { kRefused, kRemoved, kEmptyList, kEmptyString };

Emptied emptied(const KeySpec& spec) {
  if (spec.required) return Emptied::kRefused;
  if (is_list(spec.type)) return Emptied::kEmptyList;
  if (!spec.default_value) return Emptied::kRemoved;
  if (spec.type == Type::kString && spec.default_value->IsScalar() && spec.default_value->Scalar().empty()) {
    return Emptied::kEmptyString;
  }
  return Emptied::kRefused;
}

// Replaces the key's empty value (null) by what it stands for; a key that has none keeps it, for the validator.
void clear_empty_value(Config& config, const KeySpec& spec) {
  const YAML::Node node = config.node(spec.key);
  if (!node.IsDefined() || !node.IsNull()) return;
  const Origin origin = config.origin(spec.key);  // a copy: set() replaces the one recorded
  switch (emptied(spec)) {
    case Emptied::kRemoved: config.erase(spec.key); return;
    case Emptied::kEmptyList: config.set(spec.key, YAML::Node(YAML::NodeType::Sequence), origin); return;
    case Emptied::kEmptyString: config.set(spec.key, YAML::Load("\"\""), origin); return;  // as 'key=""' gives it
    case Emptied::kRefused: return;
  }
}

// What a key takes, for a message: "a number >= 0", "one of [sgd, adamw]", "an integer >= 1 or auto".
std::string takes_text(const KeySpec& spec) {
  std::string text;
  if (!spec.choices.empty()) {
    text = fmt::format("one of [{}]", fmt::join(spec.choices, ", "));
  } else if (spec.type == Type::kBool) {
    text = "true or false";
  } else {
    text = type_name(spec.type);
    const Type type = element_type(spec.type);
    if ((type == Type::kInt || type == Type::kDouble) && (spec.min || spec.max)) {
      text += " " + bounds_text(spec);
    }
  }
  if (!spec.words.empty()) text += fmt::format(" or {}", fmt::join(spec.words, ", "));
  return text;
}

// Why a key that has no empty value cannot be left empty, what it takes instead, and where it is a string that
// may be empty, how that is written (on the command line the shell takes the quotes: they go inside single ones).
std::string empty_problem(const KeySpec& spec, const Origin& origin) {
  std::string text =
      fmt::format("'{}' {}: it takes {}", spec.key,
                  spec.required ? "is required and cannot be empty" : "cannot be empty", takes_text(spec));
  if (spec.default_value) {
    YAML::Emitter e;
    e << YAML::Flow << *spec.default_value;
    text += fmt::format(" (default {})", e.c_str());
  }
  const bool empty_string_allowed =
      spec.type == Type::kString && !spec.required &&
      (spec.choices.empty() || std::find(spec.choices.begin(), spec.choices.end(), "") != spec.choices.end());
  if (empty_string_allowed) {
    text += origin.file.empty()
                ? fmt::format("; an empty string is written '{}=\"\"'", spec.key)
                : fmt::format("; an empty string is written {}: \"\"", spec.key.substr(spec.key.rfind('.') + 1));
  }
  return text;
}

bool under(const std::string& key, const std::string& prefix) {
  return key == prefix || (key.size() > prefix.size() && key.starts_with(prefix) && key[prefix.size()] == '.');
}

// A name as common_name() keys it: lower case, '-' as '_' (Max-Epochs, --batch-size -> max_epochs, batch_size).
std::string normal_name(std::string_view name) {
  while (name.starts_with('-')) name.remove_prefix(1);
  std::string out(name);
  for (char& c : out) c = c == '-' ? '_' : static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

// The state of one validation run: the schema's key space and the problems found so far.
class Validator {
 public:
  // `names`: other names of keys (common_name(), the aliases without their dashes, a key's own last part where no
  // other key ends so), name -> key.
  Validator(const std::map<std::string, KeySpec>& keys, const std::vector<std::string>& free_subtrees,
            std::map<std::string, std::string> names, const Config& config)
      : keys_(keys), free_subtrees_(free_subtrees), names_(std::move(names)), config_(config) {
    auto add_parents = [this](const std::string& key) {
      for (auto dot = key.find('.'); dot != std::string::npos; dot = key.find('.', dot + 1)) {
        parents_.insert(key.substr(0, dot));
      }
    };
    for (const auto& [key, spec] : keys_) {
      add_parents(key);
      candidates_.push_back(key);
    }
    for (const auto& prefix : free_subtrees_) {
      add_parents(prefix);
      candidates_.push_back(prefix);
    }
    candidates_.insert(candidates_.end(), parents_.begin(), parents_.end());
  }

  void walk(const YAML::Node& map, const std::string& prefix) {
    std::vector<std::string> names;
    for (const auto& entry : map) names.push_back(entry.first.Scalar());
    std::sort(names.begin(), names.end());
    for (const auto& name : names) {
      const std::string key = detail::join_key(prefix, name);
      const YAML::Node& as_const = map;
      check_key(key, as_const[name]);
    }
  }

  void check_missing() {
    const std::string where = config_.name().empty() ? std::string("configuration") : config_.name();
    for (const auto& [key, spec] : keys_) {
      if (!spec.required || config_.has(key)) continue;
      add_problem(fmt::format("{}: missing required key '{}' (expected {}{})", where, key, type_name(spec.type),
                              spec.help.empty() ? std::string() : ": " + spec.help));
    }
  }

  const std::vector<std::string>& problems() const { return problems_; }
  // Whether a key without an empty value was given one.
  bool refused_empty() const { return refused_empty_; }

 private:
  void check_key(const std::string& key, const YAML::Node& node) {
    const std::string origin = config_.origin(key).str();
    if (std::any_of(free_subtrees_.begin(), free_subtrees_.end(), [&](const auto& p) { return under(key, p); })) {
      return;
    }
    if (const auto spec = keys_.find(key); spec != keys_.end()) {
      if (node.IsNull()) {  // the empty values that stand for something were replaced before the walk
        refused_empty_ = true;
        add_problem(fmt::format("{}: {}", origin, empty_problem(spec->second, config_.origin(key))));
        return;
      }
      for (const auto& problem : value_problems(spec->second, node)) {
        add_problem(fmt::format("{}: {}", origin, problem));
      }
      return;
    }
    if (parents_.count(key)) {
      if (node.IsMap()) return walk(node, key);
      add_problem(fmt::format("{}: '{}' must be a mapping (of keys such as '{}'), got {}", origin, key,
                              first_key_under(key), detail::describe(node)));
      return;
    }
    // An unknown section (trainer: {max_epochs: 3}) holding a key known by another name: each of its keys, with
    // the key it means; else the section, with the one spelt like it.
    if (node.IsMap() && names_a_leaf(node)) return report_leaves(key, node);
    add_problem(fmt::format("{}: unknown key '{}'{}", origin, key, suggestion_for(key, node)));
  }

  // Whether a key below `map` (at any depth) has a name of names_ as its last part.
  bool names_a_leaf(const YAML::Node& map) const {
    for (const auto& entry : map) {
      if (entry.second.IsMap() ? names_a_leaf(entry.second) : names_.count(normal_name(entry.first.Scalar())) > 0) {
        return true;
      }
    }
    return false;
  }

  void report_leaves(const std::string& prefix, const YAML::Node& map) {
    std::vector<std::string> names;
    for (const auto& entry : map) names.push_back(entry.first.Scalar());
    std::sort(names.begin(), names.end());
    const YAML::Node& as_const = map;
    for (const auto& name : names) {
      const std::string key = detail::join_key(prefix, name);
      const YAML::Node value = as_const[name];
      if (value.IsMap() && value.size() > 0) {
        report_leaves(key, value);
      } else {
        add_problem(fmt::format("{}: unknown key '{}'{}", config_.origin(key).str(), key, suggestion_for(key, value)));
      }
    }
  }

  std::string first_key_under(const std::string& prefix) const {
    for (const auto& candidate : candidates_) {
      if (under(candidate, prefix) && candidate != prefix) return candidate;
    }
    return prefix;
  }

  // "; did you mean 'optim.lr'?" by the name the key's last part is (learning_rate, lr: optim.lr; warmup_steps:
  // schedule.warmup_steps, where spelling says train.max_steps), else by spelling, else by the last part of a parent
  // ("args" -> "model.args") or of one of several keys.
  std::string suggestion_for(const std::string& key, const YAML::Node& value) const {
    const std::string last = key.substr(key.rfind('.') + 1);
    if (!value.IsMap()) {
      if (const auto named = names_.find(normal_name(last)); named != names_.end()) {
        return fmt::format("; did you mean '{}'?", named->second);
      }
    }
    if (const auto match = closest_match(key, candidates_)) return fmt::format("; did you mean '{}'?", *match);
    for (const auto& candidate : candidates_) {
      if (candidate.size() > last.size() && candidate.ends_with("." + last)) {
        return fmt::format("; did you mean '{}'?", candidate);
      }
    }
    return {};
  }

  void add_problem(std::string problem) { problems_.push_back(std::move(problem)); }

  const std::map<std::string, KeySpec>& keys_;
  const std::vector<std::string>& free_subtrees_;
  const std::map<std::string, std::string> names_;
  const Config& config_;
  std::set<std::string> parents_;        // proper prefixes of declared keys: must be mappings
  std::vector<std::string> candidates_;  // every valid key or prefix, for suggestions
  std::vector<std::string> problems_;
  bool refused_empty_ = false;
};

// The value of a key for a getter, or a kConfig error when it is absent or of the wrong type.
YAML::Node typed_node(const Config& config, const std::string& key, Type type) {
  const YAML::Node node = config.node(key);
  BELLOWS_CHECK_CONFIG(
      node.IsDefined(),
      fmt::format("{}: missing key '{}' (expected {})",
                  config.name().empty() ? std::string("configuration") : config.name(), key, type_name(type)),
      fmt::format("set {}=VALUE, or declare a default for it in the schema", key));
  const std::string problem = type_problem(key, node, type);
  BELLOWS_CHECK_CONFIG(problem.empty(), fmt::format("{}: {}", config.origin(key).str(), problem),
                       "validate the configuration against its schema before reading it");
  return node;
}

}  // namespace

// --- declaration ---

Schema::KeyBuilder& Schema::KeyBuilder::default_value(const YAML::Node& v) {
  BELLOWS_CHECK(v.IsDefined() && type_problem(spec_.key, v, spec_.type).empty(),
                fmt::format("schema default for {}", type_problem(spec_.key, v, spec_.type)),
                "give the default the key's declared type");
  YAML::Node copy = YAML::Clone(v);
  detail::shorten_code_doubles(copy);
  spec_.default_value = copy;
  return *this;
}

Schema::KeyBuilder& Schema::KeyBuilder::required() {
  spec_.required = true;
  return *this;
}

Schema::KeyBuilder& Schema::KeyBuilder::min(double v) {
  spec_.min = v;
  return *this;
}

Schema::KeyBuilder& Schema::KeyBuilder::max(double v) {
  spec_.max = v;
  return *this;
}

Schema::KeyBuilder& Schema::KeyBuilder::choices(std::vector<std::string> c) {
  spec_.choices = std::move(c);
  return *this;
}

Schema::KeyBuilder& Schema::KeyBuilder::or_words(std::vector<std::string> w) {
  spec_.words = std::move(w);
  return *this;
}

Schema::KeyBuilder& Schema::KeyBuilder::file_path(PathPart part) {
  BELLOWS_CHECK(spec_.type == Type::kString, fmt::format("{}: only string keys name files", spec_.key), "");
  spec_.file_path = true;
  spec_.path_part = std::move(part);
  return *this;
}

Schema::KeyBuilder Schema::add(const std::string& key, Type type, const std::string& help) {
  KeySpec spec;
  spec.key = key;
  spec.type = type;
  spec.help = help;
  add(spec);
  return KeyBuilder(keys_.at(key));
}

void Schema::add(const KeySpec& spec) {
  const std::string& key = spec.key;
  BELLOWS_CHECK(!detail::split_key(key).empty(), fmt::format("schema key '{}' is not a dotted name", key), "");
  BELLOWS_CHECK(!keys_.count(key), fmt::format("schema key '{}' is declared twice", key), "");
  for (const auto& [existing, declared] : keys_) {
    BELLOWS_CHECK(
        !under(existing, key) && !under(key, existing),
        fmt::format("schema key '{}' conflicts with '{}': a key cannot hold both a value and keys", key, existing), "");
  }
  keys_.emplace(key, spec);
}

namespace detail {

std::size_t word_index(const Config& c, const std::string& key, const std::vector<std::string>& words) {
  const std::string value = get_string(c, key);
  const auto it = std::find(words.begin(), words.end(), value);
  BELLOWS_CHECK_CONFIG(it != words.end(), fmt::format("'{}' is '{}' ({}), expected one of {}", key, value, c.origin(key).str(), fmt::join(words, ", ")),
                       "set it to one of those");
  return static_cast<std::size_t>(it - words.begin());
}

}  // namespace detail

void Schema::alias(const std::string& flag, const std::string& key) {
  BELLOWS_CHECK(flag.starts_with("--") && flag.size() > 2 && flag.find('=') == std::string::npos,
                fmt::format("alias '{}' for '{}' must look like --name", flag, key), "");
  aliases_[flag] = key;
}

void Schema::common_name(const std::string& name, const std::string& key) {
  BELLOWS_CHECK(keys_.count(key), fmt::format("common name '{}' names '{}', which is not a declared key", name, key),
                "declare the key first, or correct the name it stands for");
  BELLOWS_CHECK(!name.empty() && name == normal_name(name) && name.find('.') == std::string::npos,
                fmt::format("common name '{}' for '{}' is not a lower-case name with underscores", name, key), "");
  BELLOWS_CHECK(!common_names_.count(name) || common_names_.at(name) == key,
                fmt::format("common name '{}' names both '{}' and '{}'", name, common_names_.at(name), key), "");
  common_names_[name] = key;
}

void Schema::allow_free_subtree(const std::string& prefix) {
  BELLOWS_CHECK(!detail::split_key(prefix).empty(), fmt::format("free subtree '{}' is not a dotted name", prefix), "");
  free_subtrees_.push_back(prefix);
}

// --- validation ---

void Schema::validate(Config& config) const {
  for (const auto& [key, spec] : keys_) clear_empty_value(config, spec);
  for (const auto& [key, spec] : keys_) {
    if (spec.default_value) config.set_default(key, *spec.default_value);
  }
  // Other names first: a common name decides a clash with an alias's name, both with a key's own last part.
  std::map<std::string, std::string> names = common_names_;
  for (const auto& [flag, key] : aliases_) names.emplace(normal_name(flag), key);
  std::map<std::string, std::vector<std::string>> by_last_part;
  for (const auto& [key, spec] : keys_) by_last_part[normal_name(key.substr(key.rfind('.') + 1))].push_back(key);
  for (const auto& [last, owners] : by_last_part) {
    if (owners.size() == 1) names.emplace(last, owners.front());  // several (enabled): spelling decides among them
  }
  Validator validator(keys_, free_subtrees_, std::move(names), config);
  validator.walk(config.root(), "");
  validator.check_missing();
  BELLOWS_CHECK_CONFIG(validator.problems().empty(), detail::problem_list(validator.problems()),
                       std::string("fix each value where the line says it was set, or override it with key=value") +
                           (validator.refused_empty()
                                ? "; an empty value (key=) clears only a key that can be empty: a list, a string whose "
                                  "default is \"\", a key without a default"
                                : ""));
  resolve_paths(config);
}

// Every file key by one rule (config/paths.h), here and nowhere else: a reader of the key gets the absolute path.
// A value already absolute stays as it is, so validating twice changes nothing.
void Schema::resolve_paths(Config& config) const {
  for (const auto& [key, spec] : keys_) {
    if (!spec.file_path || !config.has(key)) continue;
    const std::string value = config.node(key).Scalar();
    const std::size_t length = spec.path_part ? std::min(spec.path_part(config, value), value.size()) : value.size();
    const std::string written = value.substr(0, length);
    if (written.empty() || std::filesystem::path(written).is_absolute()) continue;
    Origin origin = config.origin(key);
    origin.written_path = value;
    config.set(key, YAML::Node(resolve_path(written, origin).string() + value.substr(length)), origin);
  }
}

// --- typed getters ---

bool get_bool(const Config& config, const std::string& key) {
  return *detail::as_bool(typed_node(config, key, Type::kBool));
}

std::int64_t get_int(const Config& config, const std::string& key) {
  return *detail::as_int(typed_node(config, key, Type::kInt));
}

bool is_word(const Config& config, const std::string& key, const std::string& word) {
  const YAML::Node node = config.node(key);
  return node.IsDefined() && node.IsScalar() && node.Scalar() == word;
}

double get_double(const Config& config, const std::string& key) {
  return *detail::as_double(typed_node(config, key, Type::kDouble));
}

std::string get_string(const Config& config, const std::string& key) {
  return typed_node(config, key, Type::kString).Scalar();
}

std::vector<std::string> get_string_list(const Config& config, const std::string& key) {
  std::vector<std::string> out;
  const YAML::Node node = typed_node(config, key, Type::kStringList);
  if (node.IsScalar()) return {node.Scalar()};
  for (const auto& element : node) out.push_back(element.Scalar());
  return out;
}

std::vector<std::int64_t> get_int_list(const Config& config, const std::string& key) {
  std::vector<std::int64_t> out;
  for (const auto& element : typed_node(config, key, Type::kIntList)) out.push_back(*detail::as_int(element));
  return out;
}

std::vector<double> get_double_list(const Config& config, const std::string& key) {
  std::vector<double> out;
  for (const auto& element : typed_node(config, key, Type::kDoubleList)) out.push_back(*detail::as_double(element));
  return out;
}

}  // namespace bellows::config
