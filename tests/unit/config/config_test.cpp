// The configuration tree: dotted access, origins, merging, key=value and alias overrides, and the sorted
// YAML printout that must read back to the same leaves.
#include "bellows/config/config.h"

#include <gtest/gtest.h>

#include "bellows/config/schema.h"
#include "config_test_util.h"

namespace bellows::config {
namespace {

using test_support::error_from;
using test_support::leaves;
using test_support::test_schema;

// --- the tree ---

TEST(ConfigTree, SetHasNodeAndOrigin) {
  Config c;
  EXPECT_FALSE(c.has("optim.lr"));
  EXPECT_FALSE(c.node("optim.lr").IsDefined());
  c.set("optim.lr", YAML::Node(0.5), Origin::in_file("a.yaml", 3, 5));
  EXPECT_TRUE(c.has("optim.lr"));
  EXPECT_TRUE(c.has("optim"));
  EXPECT_TRUE(c.node("optim").IsMap());
  EXPECT_EQ(c.node("optim.lr").as<double>(), 0.5);
  EXPECT_EQ(c.origin("optim.lr").str(), "a.yaml:3:5");
  EXPECT_EQ(c.origin("optim").str(), "a.yaml:3:5");             // a parent made for the key takes its origin
  EXPECT_EQ(c.origin("optim.lr.nothing").str(), "a.yaml:3:5");  // nearest recorded ancestor
  EXPECT_EQ(c.origin("nowhere").str(), "unknown origin");
}

TEST(ConfigTree, NodeIsACopy) {
  Config c;
  c.set("a.b", YAML::Node(1), Origin::noted("test"));
  YAML::Node copy = c.node("a");
  copy["b"] = 2;
  copy["c"] = 3;
  EXPECT_EQ(c.node("a.b").as<int>(), 1);
  EXPECT_FALSE(c.has("a.c"));
}

TEST(ConfigTree, CopiesAndAssignmentsAreIndependent) {
  Config a = Config::parse("x: 1\n", "a.yaml");
  Config copy = a;
  copy.set("x", YAML::Node(2), Origin::noted("copy"));
  copy.set("y", YAML::Node(3), Origin::noted("copy"));
  EXPECT_EQ(a.node("x").Scalar(), "1");
  EXPECT_FALSE(a.has("y"));
  EXPECT_EQ(a.origin("x").str(), "a.yaml:1:1");

  Config moved = std::move(a);
  a.set("v", YAML::Node(1), Origin::noted("test"));  // a moved-from config is empty and usable
  EXPECT_EQ(a.leaf_keys(), std::vector<std::string>{"v"});
  a = Config::parse("z: 9\n", "other.yaml");  // reusing the moved-from config must not touch `moved`
  EXPECT_EQ(moved.leaf_keys(), std::vector<std::string>{"x"});
  EXPECT_EQ(moved.node("x").Scalar(), "1");

  Config assigned;
  assigned = moved;
  moved.set("x", YAML::Node(5), Origin::noted("test"));
  EXPECT_EQ(assigned.node("x").Scalar(), "1");
  assigned = Config::parse("w: 0\n", "w.yaml");  // assigning over must not rewrite `moved`'s tree
  EXPECT_EQ(moved.node("x").Scalar(), "5");
  EXPECT_EQ(assigned.leaf_keys(), std::vector<std::string>{"w"});
}

// Everything a config carries travels with it: the tree, the origins and the plan notes (a tuned plan's row; copies
// once dropped them, and a run assembled from a copy lost the plan's "tuned" row).
TEST(ConfigTree, CopiesAndMovesKeepThePlanNotes) {
  Config a = Config::parse("x: 1\n", "a.yaml");
  a.add_plan_note({"tuned", "plan.json", "from plan.json"});
  const Config copy = a;
  Config assigned;
  assigned = a;
  ASSERT_EQ(copy.plan_notes().size(), 1u);
  EXPECT_EQ(copy.plan_notes()[0].key, "tuned");
  EXPECT_EQ(assigned.plan_notes().size(), 1u);
  Config moved = std::move(assigned);
  EXPECT_EQ(moved.plan_notes().size(), 1u);
  Config move_assigned;
  move_assigned = std::move(moved);
  ASSERT_EQ(move_assigned.plan_notes().size(), 1u);
  EXPECT_EQ(move_assigned.plan_notes()[0].reason, "from plan.json");
}

TEST(ConfigTree, SetBelowAScalarIsAnErrorNamingTheKey) {
  Config c;
  c.set("optim", YAML::Node("adam"), Origin::in_file("run.yaml", 2, 1));
  const Error e = error_from([&] { c.set("optim.lr", YAML::Node(0.1), Origin::noted("test")); });
  EXPECT_EQ(e.kind(), ErrorKind::kConfig);
  EXPECT_EQ(e.message(),
            "test: cannot set 'optim.lr': its parent 'optim' holds 'adam' (set at run.yaml:2:1), not a mapping");
}

TEST(ConfigTree, SetDefaultFillsOnlyAbsentKeys) {
  Config c = Config::parse("optim:\n  lr: 0.5\nmodel: mlp\n", "run.yaml");
  c.set_default("optim.lr", YAML::Node(0.1));
  c.set_default("optim.momentum", YAML::Node(0.9));
  c.set_default("model.name", YAML::Node("x"));  // blocked by the scalar 'model': quietly skipped
  EXPECT_EQ(c.node("optim.lr").Scalar(), "0.5");
  EXPECT_EQ(c.origin("optim.lr").str(), "run.yaml:2:3");
  EXPECT_EQ(c.node("optim.momentum").Scalar(), "0.9");
  EXPECT_EQ(c.origin("optim.momentum").str(), "schema default");
  EXPECT_EQ(c.node("model").Scalar(), "mlp");
}

TEST(ConfigTree, LeafKeysAreSortedAndIncludeNullsListsAndEmptyMaps) {
  const Config c = Config::parse("z: 1\na:\n  list: [1, 2]\n  empty: {}\n  nothing:\n  deep: {x: {y: true}}\n", "t");
  EXPECT_EQ(c.leaf_keys(), (std::vector<std::string>{"a.deep.x.y", "a.empty", "a.list", "a.nothing", "z"}));
}

TEST(ConfigTree, MergeDeepMergesMapsAndReplacesScalarsAndLists) {
  Config low = Config::parse("a: {x: 1, y: 2, list: [1, 2, 3]}\nb: {deep: 1}\nc: 5\n", "low.yaml");
  const Config high = Config::parse("a: {y: 20, list: [9]}\nb: flat\nc: {now: map}\n", "high.yaml");
  low.merge(high);
  EXPECT_EQ(low.node("a.x").Scalar(), "1");
  EXPECT_EQ(low.node("a.y").Scalar(), "20");
  EXPECT_EQ(low.node("a.list").size(), 1u);
  EXPECT_EQ(low.node("b").Scalar(), "flat");
  EXPECT_EQ(low.node("c.now").Scalar(), "map");
  EXPECT_EQ(low.origin("a.x").str(), "low.yaml:1:5");
  EXPECT_EQ(low.origin("a.y").str(), "high.yaml:1:5");
  EXPECT_EQ(low.origin("c.now").str(), "high.yaml:3:5");
  EXPECT_FALSE(low.has("b.deep"));
  EXPECT_EQ(low.leaf_keys(), (std::vector<std::string>{"a.list", "a.x", "a.y", "b", "c.now"}));
}

// --- key=value overrides ---

TEST(ConfigOverride, ValuesAreParsedAsYaml) {
  Config c = Config::parse("optim:\n  lr: 0.1\ndata:\n  shuffle: true\n", "run.yaml");
  c.apply_override("optim.lr=3e-4");
  c.apply_override("data.shuffle=false");
  c.apply_override("data.tags=[a, b]");
  c.apply_override("data.batch_size=64");
  c.apply_override("model.args.depth=4");  // a new nested key: parents are created
  c.apply_override("model.name=\"64\"");   // quoted: stays a string
  c.apply_override("note=has=equals");     // only the first '=' splits
  EXPECT_DOUBLE_EQ(get_double(c, "optim.lr"), 3e-4);
  EXPECT_FALSE(get_bool(c, "data.shuffle"));
  EXPECT_EQ(get_string_list(c, "data.tags"), (std::vector<std::string>{"a", "b"}));
  EXPECT_EQ(get_int(c, "data.batch_size"), 64);
  EXPECT_EQ(get_int(c, "model.args.depth"), 4);
  EXPECT_EQ(get_string(c, "model.name"), "64");
  EXPECT_EQ(error_from([&] { get_int(c, "model.name"); }).kind(), ErrorKind::kConfig);
  EXPECT_EQ(get_string(c, "note"), "has=equals");
  EXPECT_EQ(c.origin("optim.lr").str(), "command line 'optim.lr=3e-4'");
  EXPECT_EQ(c.origin("model.args.depth").str(), "command line 'model.args.depth=4'");
}

TEST(ConfigOverride, MapValueDeepMergesAndScalarReplacesMap) {
  Config c = Config::parse("optim:\n  lr: 0.1\n  momentum: 0.9\n", "run.yaml");
  c.apply_override("optim={momentum: 0.5, nesterov: true}");
  EXPECT_EQ(c.node("optim.lr").Scalar(), "0.1");
  EXPECT_EQ(c.node("optim.momentum").Scalar(), "0.5");
  EXPECT_TRUE(get_bool(c, "optim.nesterov"));
  EXPECT_EQ(c.origin("optim.lr").str(), "run.yaml:2:3");
  c.apply_override("optim=sgd");
  EXPECT_EQ(c.leaf_keys(), (std::vector<std::string>{"optim"}));
}

TEST(ConfigOverride, KeyBelowAScalarOrListIsAConfigErrorNamingTheKey) {
  Config c = Config::parse("optim:\n  lr: 0.1\ndata:\n  tags: [a]\n", "run.yaml");
  Error e = error_from([&] { c.apply_override("optim.lr.warmup=5"); });
  EXPECT_EQ(e.kind(), ErrorKind::kConfig);
  EXPECT_EQ(e.message(),
            "command line 'optim.lr.warmup=5': cannot set 'optim.lr.warmup': its parent 'optim.lr' holds 0.1 "
            "(set at run.yaml:2:3), not a mapping");
  e = error_from([&] { c.apply_override("data.tags.first=x"); });
  EXPECT_EQ(e.kind(), ErrorKind::kConfig);
  EXPECT_NE(e.message().find("cannot set 'data.tags.first': its parent 'data.tags' holds a list"), std::string::npos);
  EXPECT_EQ(c.node("optim.lr").Scalar(), "0.1");  // untouched
}

TEST(ConfigOverride, MalformedArgumentsAreUsageErrors) {
  Config c;
  Error e = error_from([&] { c.apply_override("optim.lr"); });
  EXPECT_EQ(e.kind(), ErrorKind::kUsage);
  EXPECT_EQ(e.message(), "command line 'optim.lr': expected key=value");
  EXPECT_EQ(error_from([&] { c.apply_override("=3"); }).kind(), ErrorKind::kUsage);
  e = error_from([&] { c.apply_override("optim..lr=3"); });
  EXPECT_EQ(e.kind(), ErrorKind::kUsage);
  EXPECT_EQ(e.message(), "command line 'optim..lr=3': 'optim..lr' is not a valid key");
}

TEST(ConfigOverride, InvalidYamlValueIsAConfigErrorNamingTheArgument) {
  Config c;
  const Error e = error_from([&] { c.apply_override("data.tags=[a, b"); });
  EXPECT_EQ(e.kind(), ErrorKind::kConfig);
  EXPECT_TRUE(e.message().starts_with("command line 'data.tags=[a, b': the value of 'data.tags' is not valid YAML: "))
      << e.message();
}

// Found by fuzzing (tests/fuzz/config_fuzz.cpp): a map value whose keys are not names ('--lr=: 3' is a map with
// a null key; 'x={a.b: 1}' a dotted one) was merged in, leaving a node no key reaches (to_yaml threw yaml-cpp's
// InvalidNode) or a config that printed but did not load again. Now a config error, and the config unchanged.
TEST(ConfigOverride, MapValuesWhoseKeysAreNotNamesAreConfigErrors) {
  for (const std::string bad : {"ema.enabled=: 5", "optim={: 3}", "optim={lr: {: 1}}", "data.csv={a.b: 1}", "model=[{x.y: 1}]"}) {
    Config c = Config::parse("optim: {lr: 0.1}\n", "run.yaml");
    const std::string before = c.to_yaml();
    try {
      c.apply_override(bad);
      ADD_FAILURE() << bad << " was accepted";
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::kConfig) << bad;
      EXPECT_NE(e.message().find("holds a key that is not a name"), std::string::npos) << e.message();
    }
    EXPECT_EQ(c.to_yaml(), before) << bad;
  }
}

TEST(ConfigOverride, IncludeKeysCannotBeOverridden) {
  Config c;
  const Error e = error_from([&] { c.apply_override("experiment=other.yaml"); });
  EXPECT_EQ(e.kind(), ErrorKind::kConfig);
  EXPECT_EQ(e.message(),
            "command line 'experiment=other.yaml': 'experiment' names a file to compose and can only be set in a "
            "config file");
  EXPECT_NO_THROW(c.apply_override("model.experiment=fine"));  // only the top-level key is special
}

TEST(ConfigOverride, AliasFlagsInBothFormsAndPlainOverrides) {
  const Schema schema = test_schema();
  Config c = Config::parse("data:\n  batch_size: 8\n", "run.yaml");
  c.apply_arguments({"--batch-size", "64", "--lr=1e-3", "optim.momentum=0.5"}, schema.aliases());
  EXPECT_EQ(get_int(c, "data.batch_size"), 64);
  EXPECT_EQ(c.origin("data.batch_size").str(), "command line '--batch-size 64'");
  EXPECT_DOUBLE_EQ(get_double(c, "optim.lr"), 1e-3);
  EXPECT_EQ(c.origin("optim.lr").str(), "command line '--lr=1e-3'");
  EXPECT_DOUBLE_EQ(get_double(c, "optim.momentum"), 0.5);
  c.apply_arguments({"--batch-size=128", "data.batch_size=256"}, schema.aliases());  // later wins
  EXPECT_EQ(get_int(c, "data.batch_size"), 256);
  c.apply_arguments({"data.batch_size=16", "--batch-size=24"}, schema.aliases());
  EXPECT_EQ(get_int(c, "data.batch_size"), 24);
}

TEST(ConfigOverride, UnknownFlagSuggestsTheClosest) {
  Config c;
  const Schema schema = test_schema();
  Error e = error_from([&] { c.apply_arguments({"--batch-sise=4"}, schema.aliases()); });
  EXPECT_EQ(e.kind(), ErrorKind::kUsage);
  EXPECT_EQ(e.message(), "unknown option '--batch-sise'; did you mean '--batch-size'?");
  EXPECT_EQ(e.hint(), "known options: --batch-size, --lr");
  e = error_from([&] { c.apply_arguments({"--zzzzzzzzzz"}, schema.aliases()); });
  EXPECT_EQ(e.message(), "unknown option '--zzzzzzzzzz'");
}

TEST(ConfigOverride, FlagWithoutValueAndBareWordsAreUsageErrors) {
  Config c;
  const Schema schema = test_schema();
  Error e = error_from([&] { c.apply_arguments({"--lr"}, schema.aliases()); });
  EXPECT_EQ(e.kind(), ErrorKind::kUsage);
  EXPECT_EQ(e.message(), "option '--lr' needs a value");
  e = error_from([&] { c.apply_arguments({"train"}, schema.aliases()); });
  EXPECT_EQ(e.kind(), ErrorKind::kUsage);
  EXPECT_EQ(e.message(), "command line 'train': expected key=value");
}

TEST(ConfigOverride, ValidationNamesTheArgument) {
  const Schema schema = test_schema();
  Config c = Config::parse("model:\n  name: mlp\n", "run.yaml");
  c.apply_arguments({"optim.lr=abc", "--batch-size", "0", "optim.lrr=1"}, schema.aliases());
  const Error e = error_from([&] { schema.validate(c); });
  EXPECT_EQ(e.kind(), ErrorKind::kConfig);
  EXPECT_EQ(e.message(),
            "3 configuration problems:\n"
            "command line '--batch-size 0': 'data.batch_size' is out of range: expected a value >= 1, got 0\n"
            "command line 'optim.lr=abc': 'optim.lr' expects a number, got 'abc'\n"
            "command line 'optim.lrr=1': unknown key 'optim.lrr'; did you mean 'optim.lr'?");
}

// --- printing ---

TEST(ConfigYaml, KeysSortedAndValuesQuotedOnlyWhereNeeded) {
  const Config c = Config::parse(
      "zeta: 1\nalpha:\n  s: \"true\"\n  b: true\n  list: [b, a]\n  e: {}\n  n:\n  q: ''\n  t: plain text\n", "t");
  EXPECT_EQ(c.to_yaml(),
            "alpha:\n"
            "  b: true\n"
            "  e: {}\n"
            "  list: [b, a]\n"
            "  n: ~\n"
            "  q: \"\"\n"
            "  s: \"true\"\n"
            "  t: plain text\n"
            "zeta: 1\n");
  EXPECT_EQ(Config().to_yaml(), "{}\n");
}

TEST(ConfigYaml, RoundTripGivesTheSameLeaves) {
  Config c = Config::parse(
      "model:\n  name: mlp\n  args:\n    layers: [{width: 64, act: relu}, {width: \"32\"}]\n    empty: {}\n"
      "    text: \"line one\\nline two: with colon\"\n    star: '*not an alias'\n    hash: 'a # b'\n"
      "    tilde: '~'\n    nothing:\n    num_text: '3e-4'\n    big: 12345678901234567890\n    neg: -.inf\n"
      "optim:\n  lr: 3e-4\n",
      "run.yaml");
  c.apply_override("data.tags=[a, 'b c', \"1\", 2]");
  test_schema().validate(c);  // defaults are part of what is printed
  const std::string text = c.to_yaml();
  const Config back = Config::parse(text, "x");
  EXPECT_EQ(leaves(back), leaves(c)) << text;
  EXPECT_EQ(back.leaf_keys(), c.leaf_keys());
  EXPECT_NE(text.find("  momentum: 0.9\n"), std::string::npos) << text;  // a default, in its shortest form
  EXPECT_NE(text.find("  lr: 3e-4\n"), std::string::npos) << text;       // as written, not reformatted
  EXPECT_EQ(back.to_yaml(), text);
}

// The config fuzzer's finding: a value ending in a carriage return (a file saved with Windows line endings) was
// written unquoted and read back without it. Every scalar and key YAML would read back differently is quoted.
TEST(ConfigYaml, ScalarsWithControlCharactersOrBlanksSurviveTheRoundTrip) {
  Config c;
  for (const std::string& value : {std::string("f\r"), std::string(" lead"), std::string("trail "), std::string("a\tb"),
                                   std::string("bell\a"), std::string("\r\n")}) {
    YAML::Node node(value);
    c.set("optim.lr", node, Origin::noted("test"));
    const std::string text = c.to_yaml();
    const Config back = Config::parse(text, "x");
    EXPECT_EQ(back.node("optim.lr").Scalar(), value) << text;
  }
  Config keyed = Config::parse("a:\n  \"k\\r\": 1\n", "t");
  const Config back = Config::parse(keyed.to_yaml(), "x");
  EXPECT_EQ(back.leaf_keys(), keyed.leaf_keys()) << keyed.to_yaml();
}

}  // namespace
}  // namespace bellows::config
