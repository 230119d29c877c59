// Schema validation and typed getters: each kind of problem, its exact wording with file:line, all problems in
// one kConfig error, the type rules (int for double, no "1.5" for an int, YAML bools only) and free subtrees.
#include "bellows/config/schema.h"

#include <gtest/gtest.h>

#include <cmath>

#include "config_test_util.h"

namespace bellows::config {
namespace {

using test_support::error_from;
using test_support::kDataDir;
using test_support::leaves;
using test_support::test_schema;

// The one-line message of validating `yaml` (parsed as run.yaml, with model.name set unless it says so).
std::string problem(const std::string& yaml) {
  Config c = Config::parse(yaml, "run.yaml");
  if (!c.has("model")) c.set("model.name", YAML::Node("mlp"), Origin::noted("test"));
  const Error e = error_from([&] { test_schema().validate(c); });
  EXPECT_EQ(e.kind(), ErrorKind::kConfig) << e.what();
  return e.message();
}

TEST(SchemaValidate, ValidConfigPassesAndGetsDefaults) {
  Config c = Config::parse("model:\n  name: mlp\n  args: {anything: [1, {deep: x}]}\noptim:\n  lr: 1\n", "run.yaml");
  test_schema().validate(c);
  EXPECT_EQ(get_int(c, "data.batch_size"), 32);
  EXPECT_EQ(c.origin("data.batch_size").str(), "schema default");
  EXPECT_DOUBLE_EQ(get_double(c, "optim.lr"), 1.0);  // an int where a double is expected
  EXPECT_EQ(get_string(c, "precision"), "auto");
  EXPECT_TRUE(get_bool(c, "data.shuffle"));
  EXPECT_TRUE(get_string_list(c, "data.tags").empty());
  EXPECT_FALSE(c.has("data.sizes"));                    // no default, not required
  EXPECT_EQ(c.node("optim.momentum").Scalar(), "0.9");  // YAML::Node(0.9) stored in its shortest form
}

TEST(SchemaValidate, UnknownKeySuggestsTheClosestValidKey) {
  EXPECT_EQ(problem("optim:\n  lrr: 0.1\n"), "run.yaml:2:3: unknown key 'optim.lrr'; did you mean 'optim.lr'?");
  EXPECT_EQ(problem("data:\n  batchsize: 8\n"),
            "run.yaml:2:3: unknown key 'data.batchsize'; did you mean 'data.batch_size'?");
  EXPECT_EQ(problem("optimm:\n  beta: 0.1\n"), "run.yaml:1:1: unknown key 'optimm'; did you mean 'optim'?");
  // Not close in spelling, but the name of a key in another section.
  EXPECT_EQ(problem("momentum: 0.5\n"), "run.yaml:1:1: unknown key 'momentum'; did you mean 'optim.momentum'?");
  EXPECT_EQ(problem("zzzzzzzz: 1\n"), "run.yaml:1:1: unknown key 'zzzzzzzz'");
}

// Other tools' names for a key (Schema::common_name) and the aliases' names, matched on the last part of an unknown
// key wherever it appears.
TEST(SchemaValidate, UnknownKeySuggestsTheKeyAnotherToolsNameStandsFor) {
  const std::pair<std::string, std::string> cases[] = {
      {"optim:\n  learning_rate: 0.01\n", "run.yaml:2:3: unknown key 'optim.learning_rate'; did you mean 'optim.lr'?"},
      {"learning_rate: 0.01\n", "run.yaml:1:1: unknown key 'learning_rate'; did you mean 'optim.lr'?"},
      {"trainer:\n  Num-Workers: 4\n", "run.yaml:2:3: unknown key 'trainer.Num-Workers'; did you mean 'data.workers'?"},
      // An alias's name without its dashes: --batch-size.
      {"trainer:\n  batch-size: 4\n",
       "run.yaml:2:3: unknown key 'trainer.batch-size'; did you mean 'data.batch_size'?"},
      // A mapping names a section, not a key: spelling decides.
      {"learning_rate: {a: 1}\n", "run.yaml:1:1: unknown key 'learning_rate'"},
      // An unknown section holding a key known by a name: each of its keys, with the one it means.
      {"optimm:\n  lr: 0.1\n  beta: 0.9\n",
       "2 configuration problems:\nrun.yaml:3:3: unknown key 'optimm.beta'\n"
       "run.yaml:2:3: unknown key 'optimm.lr'; did you mean 'optim.lr'?"},
  };
  for (const auto& [yaml, expected] : cases) EXPECT_EQ(problem(yaml), expected) << yaml;
  // On the command line, the same.
  const Schema schema = test_schema();
  Config c = Config::parse("model:\n  name: mlp\n", "run.yaml");
  c.apply_override("optim.learning_rate=0.01");
  EXPECT_EQ(error_from([&] { schema.validate(c); }).message(),
            "command line 'optim.learning_rate=0.01': unknown key 'optim.learning_rate'; did you mean 'optim.lr'?");
}

TEST(SchemaValidate, AKeysNameComesBeforeAKeySpeltLikeIt) {
  Schema s;
  s.add("train.max_steps", Type::kInt, "steps").default_value(YAML::Node(0));
  s.add("train.eval_every_n_steps", Type::kInt, "steps between evaluations").default_value(YAML::Node(0));
  s.add("schedule.warmup_steps", Type::kInt, "warmup").default_value(YAML::Node(0));
  auto problem_of = [&](const std::string& yaml) {
    Config c = Config::parse(yaml, "run.yaml");
    return error_from([&] { s.validate(c); }).message();
  };
  // By spelling alone, Hugging Face's eval_steps is train.max_steps.
  EXPECT_EQ(problem_of("train:\n  eval_steps: 50\n"),
            "run.yaml:2:3: unknown key 'train.eval_steps'; did you mean 'train.max_steps'?");
  s.common_name("eval_steps", "train.eval_every_n_steps");
  EXPECT_EQ(problem_of("train:\n  eval_steps: 50\n"),
            "run.yaml:2:3: unknown key 'train.eval_steps'; did you mean 'train.eval_every_n_steps'?");
  // The last part of one declared key, as well.
  EXPECT_EQ(problem_of("train:\n  warmup_steps: 50\n"),
            "run.yaml:2:3: unknown key 'train.warmup_steps'; did you mean 'schedule.warmup_steps'?");
}

TEST(SchemaValidate, WrongTypes) {
  EXPECT_EQ(problem("data:\n  batch_size: 1.5\n"), "run.yaml:2:3: 'data.batch_size' expects an integer, got 1.5");
  EXPECT_EQ(problem("data:\n  batch_size: \"64\"\n"),
            "run.yaml:2:3: 'data.batch_size' expects an integer, got \"64\" (a quoted string)");
  EXPECT_EQ(problem("data:\n  batch_size: 99999999999999999999\n"),
            "run.yaml:2:3: 'data.batch_size' expects an integer that fits in 64 bits, got 99999999999999999999");
  EXPECT_EQ(problem("optim:\n  lr: fast\n"), "run.yaml:2:3: 'optim.lr' expects a number, got 'fast'");
  EXPECT_EQ(problem("data:\n  shuffle: yes\n"),
            "run.yaml:2:3: 'data.shuffle' expects a boolean (true or false), got 'yes'");
  EXPECT_EQ(problem("data:\n  shuffle: 1\n"), "run.yaml:2:3: 'data.shuffle' expects a boolean (true or false), got 1");
  EXPECT_EQ(problem("model:\n  name: [a]\n"), "run.yaml:2:3: 'model.name' expects a string, got a list");
  EXPECT_EQ(problem("optim:\n  lr: {a: 1}\n"), "run.yaml:2:3: 'optim.lr' expects a number, got a mapping");
  EXPECT_EQ(problem("data:\n  tags: {a: 1}\n"), "run.yaml:2:3: 'data.tags' expects a list of strings, got a mapping");
  EXPECT_EQ(problem("data:\n  sizes: 3\n"), "run.yaml:2:3: 'data.sizes' expects a list of integers, got 3");
  {  // a single string is a one-element list of strings
    Config c = Config::parse("model:\n  name: mlp\ndata:\n  tags: a\n", "run.yaml");
    test_schema().validate(c);
    EXPECT_EQ(get_string_list(c, "data.tags"), (std::vector<std::string>{"a"}));
  }
  EXPECT_EQ(problem("data:\n  sizes: [1, 2.5]\n"),
            "run.yaml:2:3: 'data.sizes' expects a list of integers, but element 1 is 2.5");
  EXPECT_EQ(problem("data:\n  tags: [a, [b]]\n"),
            "run.yaml:2:3: 'data.tags' expects a list of strings, but element 1 is a list");
  EXPECT_EQ(problem("optim: adam\n"),
            "run.yaml:1:1: 'optim' must be a mapping (of keys such as 'optim.lr'), got 'adam'");
}

// `key=` on the command line, `key:` or `key: null` in a file: the key's empty value where it has one (schema.h).
TEST(SchemaValidate, EmptyValueClearsAKeyThatCanBeEmpty) {
  const Schema schema = test_schema();
  Config c = Config::parse("model:\n  name: mlp\ndata:\n  val_path: val.csv\n  tags: [a]\n  sizes: [4]\n  limit: 9\n",
                           "run.yaml");
  c.apply_arguments({"data.val_path=", "data.tags=", "--batch-size", "8", "data.sizes=", "data.limit="},
                    schema.aliases());
  schema.validate(c);
  EXPECT_EQ(get_string(c, "data.val_path"), "");  // a string whose default is ""
  EXPECT_EQ(c.origin("data.val_path").str(), "command line 'data.val_path='");
  EXPECT_TRUE(get_string_list(c, "data.tags").empty());  // a list, with a default
  EXPECT_TRUE(get_int_list(c, "data.sizes").empty());    // a list without one
  EXPECT_FALSE(c.has("data.limit"));                     // no default: unset, as if never given
  EXPECT_EQ(get_int(c, "data.batch_size"), 8);
  // What the run keeps reads back as it was cleared.
  Config back = Config::parse(c.to_yaml(), "back.yaml");
  schema.validate(back);
  EXPECT_EQ(leaves(back), leaves(c));
  // A file's null means the same.
  Config file = Config::parse("model:\n  name: mlp\ndata:\n  val_path:\n  tags: ~\n  limit: null\n", "run.yaml");
  schema.validate(file);
  EXPECT_EQ(get_string(file, "data.val_path"), "");
  EXPECT_TRUE(get_string_list(file, "data.tags").empty());
  EXPECT_FALSE(file.has("data.limit"));
}

TEST(SchemaValidate, EmptyValueOfAKeyThatCannotBeEmptyNamesWhatItTakes) {
  const Schema schema = test_schema();
  Config c = Config::parse("model:\n  name: mlp\n", "run.yaml");
  c.apply_arguments({"optim.lr=", "data.shuffle=", "optim.name=", "schedule=", "--batch-size="}, schema.aliases());
  const Error e = error_from([&] { schema.validate(c); });
  EXPECT_EQ(e.kind(), ErrorKind::kConfig);
  EXPECT_EQ(
      e.message(),
      "5 configuration problems:\n"
      "command line '--batch-size=': 'data.batch_size' cannot be empty: it takes an integer >= 1 (default 32)\n"
      "command line 'data.shuffle=': 'data.shuffle' cannot be empty: it takes true or false (default true)\n"
      "command line 'optim.lr=': 'optim.lr' cannot be empty: it takes a number >= 0 (default 0.1)\n"
      "command line 'optim.name=': 'optim.name' cannot be empty: it takes one of [sgd, adamw] (default adamw)\n"
      "command line 'schedule=': 'schedule' cannot be empty: it takes a string (default constant); an empty string "
      "is written 'schedule=\"\"'");
  EXPECT_EQ(
      e.hint(),
      "fix each value where the line says it was set, or override it with key=value; an empty value (key=) clears "
      "only a key that can be empty: a list, a string whose default is \"\", a key without a default");
  // Quoted, the empty string is a value like any other.
  Config quoted = Config::parse("model:\n  name: mlp\n", "run.yaml");
  quoted.apply_override("schedule=\"\"");
  schema.validate(quoted);
  EXPECT_EQ(get_string(quoted, "schedule"), "");
  // In a file, the same words, with the file's spelling; a required key says so.
  EXPECT_EQ(problem("optim:\n  lr:\n"),
            "run.yaml:2:3: 'optim.lr' cannot be empty: it takes a number >= 0 (default 0.1)");
  EXPECT_EQ(
      problem("schedule: ~\n"),
      "run.yaml:1:1: 'schedule' cannot be empty: it takes a string (default constant); an empty string is written "
      "schedule: \"\"");
  EXPECT_EQ(problem("model:\n  name:\n"),
            "run.yaml:2:3: 'model.name' is required and cannot be empty: it takes a string");
}

TEST(SchemaValidate, AcceptedTypes) {
  Config c = Config::parse(
      "model:\n  name: 123\noptim:\n  lr: 2\n  momentum: .5\ndata:\n  shuffle: False\n  tags: [1, true, x]\n"
      "  sizes: [1, 0x10]\n  weights: [1, 2.5, 3e-1]\n  batch_size: +8\n",
      "run.yaml");
  ASSERT_NO_THROW(test_schema().validate(c));
  EXPECT_EQ(get_string(c, "model.name"), "123");  // strings accept any scalar text
  EXPECT_DOUBLE_EQ(get_double(c, "optim.lr"), 2.0);
  EXPECT_DOUBLE_EQ(get_double(c, "optim.momentum"), 0.5);
  EXPECT_FALSE(get_bool(c, "data.shuffle"));
  EXPECT_EQ(get_string_list(c, "data.tags"), (std::vector<std::string>{"1", "true", "x"}));
  EXPECT_EQ(get_int_list(c, "data.sizes"), (std::vector<std::int64_t>{1, 16}));
  EXPECT_EQ(get_double_list(c, "data.weights"), (std::vector<double>{1.0, 2.5, 0.3}));
  EXPECT_EQ(get_int(c, "data.batch_size"), 8);
}

TEST(SchemaValidate, OutOfRange) {
  EXPECT_EQ(problem("model:\n  name: m\n  dropout: 1.5\n"),
            "run.yaml:3:3: 'model.dropout' is out of range: expected a value in [0, 1], got 1.5");
  EXPECT_EQ(problem("optim:\n  lr: -1e-3\n"),
            "run.yaml:2:3: 'optim.lr' is out of range: expected a value >= 0, got -1e-3");
  EXPECT_EQ(problem("optim:\n  lr: .nan\n"),
            "run.yaml:2:3: 'optim.lr' is out of range: expected a value >= 0, got .nan");
  EXPECT_EQ(problem("data:\n  sizes: [4, 0]\n"),
            "run.yaml:2:3: 'data.sizes' element 1 is out of range: expected a value >= 1, got 0");
}

TEST(SchemaValidate, NotAmongChoices) {
  EXPECT_EQ(problem("precision: fp8\n"),
            "run.yaml:1:1: 'precision' must be one of [fp32, tf32, bf16-mixed, fp16-mixed, auto], got 'fp8'; did you "
            "mean 'fp32'?");
  EXPECT_EQ(problem("optim:\n  name: lbfgs\n"), "run.yaml:2:3: 'optim.name' must be one of [sgd, adamw], got 'lbfgs'");
}

TEST(SchemaValidate, MissingRequiredKey) {
  Config c = Config::parse("seed: 1\n", "run.yaml");
  const Error e = error_from([&] { test_schema().validate(c); });
  EXPECT_EQ(e.kind(), ErrorKind::kConfig);
  EXPECT_EQ(e.message(), "run.yaml: missing required key 'model.name' (expected a string: registry name of the model)");
}

TEST(SchemaValidate, FreeSubtreePassesUnchecked) {
  Config c = Config::parse("model:\n  name: m\n  args: 5\n", "run.yaml");
  EXPECT_NO_THROW(test_schema().validate(c));
  c = Config::parse("model:\n  name: m\n  args: {a: {b: [1, {c: d}]}, typo_free: 1}\n", "run.yaml");
  EXPECT_NO_THROW(test_schema().validate(c));
  c = Config::parse("model:\n  name: m\n  argz: {a: 1}\n", "run.yaml");
  EXPECT_EQ(error_from([&] { test_schema().validate(c); }).message(),
            "run.yaml:3:3: unknown key 'model.argz'; did you mean 'model.args'?");
}

TEST(SchemaValidate, AllProblemsFromAFileInOneError) {
  Config c = Config::load(kDataDir + "/errors.yaml");
  const Error e = error_from([&] { test_schema().validate(c); });
  EXPECT_EQ(e.kind(), ErrorKind::kConfig);
  const std::string file = kDataDir + "/errors.yaml";
  const std::vector<std::string> lines = {
      "5 configuration problems:",
      file + ":8:3: 'data.batch_size' expects an integer, got 1.5",
      file + ":9:3: 'data.shuffle' expects a boolean (true or false), got 'yes'",
      file + ":4:3: 'model.dropout' is out of range: expected a value in [0, 1], got 2",
      file + ":6:3: unknown key 'optim.lrr'; did you mean 'optim.lr'?",
      file +
          ":10:1: 'precision' must be one of [fp32, tf32, bf16-mixed, fp16-mixed, auto], got 'fp8'; did you mean "
          "'fp32'?",
  };
  std::string expected;
  for (const auto& line : lines) expected += (expected.empty() ? "" : "\n") + line;
  EXPECT_EQ(e.message(), expected);
  EXPECT_EQ(e.hint(), "fix each value where the line says it was set, or override it with key=value");
}

TEST(SchemaDeclare, MistakesInTheSchemaAreInternalErrors) {
  Schema s;
  s.add("optim.lr", Type::kDouble, "");
  EXPECT_EQ(error_from([&] { s.add("optim.lr", Type::kDouble, ""); }).kind(), ErrorKind::kInternal);
  EXPECT_EQ(error_from([&] { s.add("optim", Type::kString, ""); }).kind(), ErrorKind::kInternal);
  EXPECT_EQ(error_from([&] { s.add("optim.lr.x", Type::kString, ""); }).kind(), ErrorKind::kInternal);
  EXPECT_EQ(error_from([&] { s.add("a..b", Type::kString, ""); }).kind(), ErrorKind::kInternal);
  const Error e = error_from([&] { s.add("seed", Type::kInt, "").default_value(YAML::Node(0.5)); });
  EXPECT_EQ(e.kind(), ErrorKind::kInternal);
  EXPECT_EQ(e.message(), "schema default for 'seed' expects an integer, got 0.5");
  EXPECT_EQ(error_from([&] { s.alias("batch-size", "data.batch_size"); }).kind(), ErrorKind::kInternal);
  // A common name for a key that is not declared, one that is not a lower-case name, one for two keys.
  const Error undeclared = error_from([&] { s.common_name("learning_rate", "optim.learning_rate"); });
  EXPECT_EQ(undeclared.kind(), ErrorKind::kInternal);
  EXPECT_EQ(undeclared.message(),
            "common name 'learning_rate' names 'optim.learning_rate', which is not a declared key");
  EXPECT_EQ(error_from([&] { s.common_name("Learning-Rate", "optim.lr"); }).kind(), ErrorKind::kInternal);
  s.add("data.workers", Type::kInt, "");
  s.common_name("lr", "optim.lr");
  EXPECT_EQ(error_from([&] { s.common_name("lr", "data.workers"); }).kind(), ErrorKind::kInternal);
}

TEST(SchemaGetters, ReadTypedValues) {
  const Config c = Config::parse(
      "b: true\ni: -42\nh: 0x1f\nd: 2.5e-3\ninf: -.inf\ns: text\nsl: [a, b]\nil: [1, -2]\ndl: [1, .5]\n", "g.yaml");
  EXPECT_TRUE(get_bool(c, "b"));
  EXPECT_EQ(get_int(c, "i"), -42);
  EXPECT_EQ(get_int(c, "h"), 31);
  EXPECT_DOUBLE_EQ(get_double(c, "d"), 2.5e-3);
  EXPECT_DOUBLE_EQ(get_double(c, "i"), -42.0);
  EXPECT_TRUE(std::isinf(get_double(c, "inf")) && get_double(c, "inf") < 0);
  EXPECT_EQ(get_string(c, "s"), "text");
  EXPECT_EQ(get_string(c, "d"), "2.5e-3");
  EXPECT_EQ(get_string_list(c, "sl"), (std::vector<std::string>{"a", "b"}));
  EXPECT_EQ(get_int_list(c, "il"), (std::vector<std::int64_t>{1, -2}));
  EXPECT_EQ(get_double_list(c, "dl"), (std::vector<double>{1.0, 0.5}));
  EXPECT_EQ(get_int(Config::parse("m: -9223372036854775808\n", "t"), "m"), INT64_MIN);
  const Config extremes = Config::parse("huge: 1e999\ntiny: -1e-999\n", "t");
  EXPECT_TRUE(std::isinf(get_double(extremes, "huge")));
  EXPECT_EQ(get_double(extremes, "tiny"), 0.0);
}

TEST(SchemaGetters, WrongTypeOrMissingKeyIsAConfigErrorWithTheOrigin) {
  const Config c = Config::parse("d: 1.5\nb: on\nl: [1, x]\n", "g.yaml");
  Error e = error_from([&] { get_int(c, "d"); });
  EXPECT_EQ(e.kind(), ErrorKind::kConfig);
  EXPECT_EQ(e.message(), "g.yaml:1:1: 'd' expects an integer, got 1.5");
  EXPECT_EQ(error_from([&] { get_bool(c, "b"); }).message(),
            "g.yaml:2:1: 'b' expects a boolean (true or false), got 'on'");
  EXPECT_EQ(error_from([&] { get_int_list(c, "l"); }).message(),
            "g.yaml:3:1: 'l' expects a list of integers, but element 1 is 'x'");
  e = error_from([&] { get_string(c, "nope.x"); });
  EXPECT_EQ(e.kind(), ErrorKind::kConfig);
  EXPECT_EQ(e.message(), "g.yaml: missing key 'nope.x' (expected a string)");
}

}  // namespace
}  // namespace bellows::config
