// The declared shape of a configuration: every key with its type, default, allowed range or choices, and
// help text. validate() checks a Config against it and reports, in one kConfig error, every unknown key
// (with the closest valid key suggested), wrong type, out-of-range or not-allowed value and missing required
// key, each with its origin (file:line). Typed getters read validated values.
//
// Type rules: an int is accepted where a double is expected; a double (1.5) or a quoted string ("64") is not
// an int; bools are YAML 1.2 bools only (true/false, any capitalisation YAML allows), not yes/on/1; strings
// accept any scalar text; lists are sequences whose every element has the element type. Numbers follow YAML
// 1.2's core schema: 3e-4 and .5 are numbers.
//
// An empty value (null: `key=` on the command line, `key:` or `key: null` in a file) clears a key that can be
// empty: a list becomes [], a string whose default is "" becomes "", any other key without a default is removed
// (unset). Any other key (a number, a boolean, a string with another default, a required key) has no empty value:
// validation names what it takes instead (and how an empty string is written, 'name=""').
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "bellows/config/config.h"  // defines: Config, Origin

namespace bellows::config {

enum class Type { kBool, kInt, kDouble, kString, kStringList, kIntList, kDoubleList };

// Which leading part of a file key's value names a file (Schema::KeyBuilder::file_path): its length, std::string::npos
// for the whole value, 0 where the value names no file (resume's `auto`, data.npy.y's array in an .npz). `config`
// holds the other keys' values, validated.
using PathPart = std::function<std::size_t(const Config& config, const std::string& value)>;

struct KeySpec {
  std::string key;  // dotted: "optim.lr"
  Type type = Type::kString;
  std::string help;
  std::optional<YAML::Node> default_value;  // absent: no default
  bool required = false;
  std::optional<double> min, max;    // inclusive bounds for numbers (and list elements)
  std::vector<std::string> choices;  // allowed values for strings (and string-list elements)
  std::vector<std::string> words;    // numbers (kInt, kDouble): words accepted instead of a number ("auto")
  bool file_path = false;            // kString: a relative path resolves against the file that set it (see file_path())
  PathPart path_part;                // file_path: the part of the value that names a file (empty: all of it)
};

class Schema {
 public:
  // Chained builder: schema.add("optim.lr", Type::kDouble, "peak learning rate").min(0).default_value(1e-3);
  class KeyBuilder {
   public:
    // The default must have the key's type (checked here: a wrong default is a bug, kInternal). Doubles made
    // in code (YAML::Node(0.1), whose text is "0.10000000000000001") are stored in their shortest form.
    KeyBuilder& default_value(const YAML::Node& v);
    KeyBuilder& required();
    KeyBuilder& min(double v);
    KeyBuilder& max(double v);
    KeyBuilder& choices(std::vector<std::string> c);
    // A number key that also takes these words (data.batch_size: auto); read them with is_word() first.
    KeyBuilder& or_words(std::vector<std::string> w);
    // A kString key naming a file or folder, to read or to write: validate() makes a relative value absolute by the
    // one rule of config/paths.h (against the directory of the config file that set it; a command-line value, a
    // default or the embedded demo's against the working directory), so that the resolved config saved in a run or
    // a checkpoint still finds the file from anywhere. The origin keeps the value as written for the messages.
    // `part`: where only part of some values names a file.
    KeyBuilder& file_path(PathPart part = {});

    // Builds on `spec` (Schema::add's, or a config::Binding's key).
    explicit KeyBuilder(KeySpec& spec) : spec_(spec) {}

   private:
    KeySpec& spec_;
  };
  // A key may not be declared twice, nor be a parent of another declared key (kInternal).
  KeyBuilder add(const std::string& key, Type type, const std::string& help);
  void add(const KeySpec& spec);  // a key declared whole (config/binding.h)

  // Command-line flag spelling for a key: alias("--batch-size", "data.batch_size").
  void alias(const std::string& flag, const std::string& key);
  const std::map<std::string, std::string>& aliases() const { return aliases_; }

  // Another name of a declared key (kInternal otherwise), as other tools spell it: common_name("learning_rate",
  // "optim.lr"). An unknown key whose last part is such a name (or an alias's without its dashes, batch_size, or the
  // last part of one declared key, warmup_steps) is told the key it names (optim.learning_rate, trainer.learning_rate,
  // learning_rate -> "did you mean 'optim.lr'?"), before a key spelt like it: train.eval_steps means
  // train.eval_every_n_steps, not train.max_steps. Not for a key that holds a mapping (optimizer: {lr: 1}), which
  // names a section. Names are lower case with underscores; a key's last part is compared so (Eval-Steps).
  void common_name(const std::string& name, const std::string& key);
  const std::map<std::string, std::string>& common_names() const { return common_names_; }

  // Keys that may hold arbitrary sub-trees not described here (e.g. "model.args"): the prefix itself and
  // everything below it pass unchecked.
  void allow_free_subtree(const std::string& prefix);

  // Fills defaults into `config`, then checks it; throws one kConfig error listing every problem, one per
  // line, each starting with its origin ("run.yaml:4:3: ...", "command line 'optim.lr=x': ...").
  void validate(Config& config) const;

  const std::map<std::string, KeySpec>& keys() const { return keys_; }

 private:
  void resolve_paths(Config& config) const;

  std::map<std::string, KeySpec> keys_;
  std::map<std::string, std::string> aliases_;
  std::map<std::string, std::string> common_names_;  // name -> key
  std::vector<std::string> free_subtrees_;
};

// Typed access to validated values; a missing key or wrong type raises a kConfig error with the origin.
bool get_bool(const Config& config, const std::string& key);
std::int64_t get_int(const Config& config, const std::string& key);
double get_double(const Config& config, const std::string& key);
std::string get_string(const Config& config, const std::string& key);
std::vector<std::string> get_string_list(const Config& config, const std::string& key);
std::vector<std::int64_t> get_int_list(const Config& config, const std::string& key);
std::vector<double> get_double_list(const Config& config, const std::string& key);
// Whether a key declared with or_words() holds `word` rather than a number.
bool is_word(const Config& config, const std::string& key, const std::string& word);

}  // namespace bellows::config
