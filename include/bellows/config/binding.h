// Binds the fields of an options struct to config keys, once (the way CLI11 binds an option to a variable): one line
// per key names the key, the field and the help, with the checks (bounds, choices); the key's type comes from the
// field's type and its default from a default-constructed struct (or from that line, where the config's default is
// not the struct's). The same binding declares the keys in a Schema (validation, `bellows config keys`) and reads a
// validated config into a struct, so a key is never written twice.
//
//   config::Binding<OptimizerOptions> optim("optim.");
//   optim.key("lr", &OptimizerOptions::lr, "peak learning rate").min(0);   // optim.lr: a number, default 0.001
//   optim.declare(schema);
//   const OptimizerOptions o = optim.read(config);
// config::bound makes a binding once, where it is asked for (the usual way: see bound below).
#pragma once

#include <cstdint>
#include <deque>
#include <filesystem>
#include <functional>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "bellows/config/schema.h"  // defines: Schema, Type, get_*

namespace bellows::config {

namespace detail {

template <class T>
struct KeyType;  // the config type of a field type
template <> struct KeyType<bool> { static constexpr Type value = Type::kBool; };
template <> struct KeyType<std::int64_t> { static constexpr Type value = Type::kInt; };
template <> struct KeyType<int> { static constexpr Type value = Type::kInt; };
template <> struct KeyType<double> { static constexpr Type value = Type::kDouble; };
template <> struct KeyType<std::string> { static constexpr Type value = Type::kString; };
template <> struct KeyType<std::filesystem::path> { static constexpr Type value = Type::kString; };
template <> struct KeyType<std::vector<std::string>> { static constexpr Type value = Type::kStringList; };
template <> struct KeyType<std::vector<std::int64_t>> { static constexpr Type value = Type::kIntList; };
template <> struct KeyType<std::vector<double>> { static constexpr Type value = Type::kDoubleList; };

template <class T>
YAML::Node to_node(const T& value) {
  if constexpr (std::is_same_v<T, std::filesystem::path>) {
    return YAML::Node(value.string());
  } else if constexpr (std::is_same_v<T, std::vector<std::string>> || std::is_same_v<T, std::vector<std::int64_t>> ||
                       std::is_same_v<T, std::vector<double>>) {
    YAML::Node seq(YAML::NodeType::Sequence);
    for (const auto& v : value) seq.push_back(v);
    return seq;
  } else {
    return YAML::Node(value);
  }
}

template <class T>
T read_value(const Config& c, const std::string& key) {
  if constexpr (std::is_same_v<T, bool>) return get_bool(c, key);
  else if constexpr (std::is_same_v<T, std::int64_t>) return get_int(c, key);
  else if constexpr (std::is_same_v<T, int>) return static_cast<int>(get_int(c, key));
  else if constexpr (std::is_same_v<T, double>) return get_double(c, key);
  else if constexpr (std::is_same_v<T, std::string>) return get_string(c, key);
  else if constexpr (std::is_same_v<T, std::filesystem::path>) return std::filesystem::path(get_string(c, key));
  else if constexpr (std::is_same_v<T, std::vector<std::string>>) return get_string_list(c, key);
  else if constexpr (std::is_same_v<T, std::vector<std::int64_t>>) return get_int_list(c, key);
  else return get_double_list(c, key);
}

// An enum value by its word (words[i] spells the enum's value i); kConfig error naming the key otherwise.
std::size_t word_index(const Config& c, const std::string& key, const std::vector<std::string>& words);

}  // namespace detail

template <class Options>
class Binding {
 public:
  // Reads, for each key, one value into an options struct.
  using Reader = std::function<void(const Config& config, const std::string& key, Options& options)>;

  // `prefix` goes before every key name ("optim." makes "lr" optim.lr); `defaults` hold the keys' default values.
  explicit Binding(std::string prefix = "", Options defaults = Options{}) : prefix_(std::move(prefix)), defaults_(std::move(defaults)) {}

  // A field read as it is: bool, an integer, double, string, path, or a list of strings, integers or numbers.
  template <class T>
  Schema::KeyBuilder key(const std::string& name, T Options::*field, const std::string& help) {
    Schema::KeyBuilder b = add(name, detail::KeyType<T>::value, help,
                               [field](const Config& c, const std::string& key, Options& o) { o.*field = detail::read_value<T>(c, key); });
    b.default_value(detail::to_node(defaults_.*field));
    return b;
  }

  // An enum field, spelled in the config by `words` (words[i] is the enum's value i): a string key with those choices.
  template <class E>
    requires std::is_enum_v<E>
  Schema::KeyBuilder key(const std::string& name, E Options::*field, const std::vector<std::string>& words, const std::string& help) {
    Schema::KeyBuilder b = add(name, Type::kString, help, [field, words](const Config& c, const std::string& key, Options& o) {
      o.*field = static_cast<E>(detail::word_index(c, key, words));
    });
    b.choices(words).default_value(YAML::Node(words.at(static_cast<std::size_t>(defaults_.*field))));
    return b;
  }

  // A key whose value is converted by `read` (a list into two fields, a switch into an optional): its default is
  // given on the returned builder.
  Schema::KeyBuilder custom(const std::string& name, Type type, const std::string& help, Reader read) {
    return add(name, type, help, std::move(read));
  }

  // The keys of a member struct, bound by `sub` (with its own prefix).
  template <class Sub>
  void nest(Sub Options::*member, const Binding<Sub>& sub) {
    for (const auto& k : sub.keys()) {
      keys_.push_back({k.spec, [member, read = k.read](const Config& c, const std::string& key, Options& o) { read(c, key, o.*member); }});
    }
  }

  // Declares every bound key (type, default, bounds, choices, help) in `schema`.
  void declare(Schema& schema) const {
    for (const auto& k : keys_) schema.add(k.spec);
  }
  // A validated config's values of the bound keys, over the defaults.
  Options read(const Config& config) const {
    Options o = defaults_;
    read_into(config, o);
    return o;
  }
  void read_into(const Config& config, Options& options) const {
    for (const auto& k : keys_) k.read(config, k.spec.key, options);
  }

  struct Key {
    KeySpec spec;
    Reader read;
  };
  const std::deque<Key>& keys() const { return keys_; }

 private:
  Schema::KeyBuilder add(const std::string& name, Type type, const std::string& help, Reader read) {
    KeySpec spec;
    spec.key = prefix_ + name;
    spec.type = type;
    spec.help = help;
    keys_.push_back({std::move(spec), std::move(read)});
    return Schema::KeyBuilder(keys_.back().spec);
  }

  std::string prefix_;
  Options defaults_;
  std::deque<Key> keys_;  // a deque: the builders returned keep pointing at their key
};

// A binding made once, the first time it is asked for; `fill` declares its keys. Each call site's lambda is a type of
// its own, so each site keeps its own binding:
//   const config::Binding<MlpOptions>& mlp_binding() {
//     return config::bound<MlpOptions>("model.", [](config::Binding<MlpOptions>& b) { b.key(...); });
//   }
template <class Options, class Fill>
const Binding<Options>& bound(const std::string& prefix, Fill fill) {
  static const Binding<Options> binding = [&] {
    Binding<Options> b(prefix);
    fill(b);
    return b;
  }();
  return binding;
}

}  // namespace bellows::config
