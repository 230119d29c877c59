// Loading and composing configuration files (fixtures in tests/data/config/): the order
// experiment < hardware_profile < own keys, deep merge, nested includes, cycles, missing files, syntax errors.
#include <gtest/gtest.h>

#include "bellows/config/config.h"
#include "bellows/config/schema.h"
#include "config_test_util.h"

namespace bellows::config {
namespace {

using test_support::error_from;
using test_support::kDataDir;

const std::string run_file = kDataDir + "/run.yaml";
const std::string base_file = kDataDir + "/experiments/base.yaml";
const std::string common_file = kDataDir + "/experiments/common.yaml";
const std::string profile_file = kDataDir + "/profiles/big_gpu.yaml";

TEST(ConfigLoad, ComposesExperimentThenProfileThenOwnKeys) {
  const Config c = Config::load(run_file);
  EXPECT_EQ(get_int(c, "seed"), 7);                        // only in common.yaml (experiment of experiment)
  EXPECT_EQ(get_string(c, "model.name"), "mlp");           // base.yaml over common.yaml
  EXPECT_DOUBLE_EQ(get_double(c, "model.dropout"), 0.1);   // common.yaml, kept by the deep merge
  EXPECT_EQ(get_int(c, "model.args.hidden"), 64);          // base.yaml
  EXPECT_EQ(get_string(c, "optim.name"), "sgd");           // base.yaml, beside run.yaml's optim.lr
  EXPECT_DOUBLE_EQ(get_double(c, "optim.lr"), 0.01);       // run.yaml over base.yaml
  EXPECT_DOUBLE_EQ(get_double(c, "optim.momentum"), 0.9);  // base.yaml
  EXPECT_EQ(get_int(c, "data.batch_size"), 256);           // hardware profile over experiment
  EXPECT_EQ(get_int(c, "data.workers"), 2);                // experiment, beside the profile's keys
  EXPECT_EQ(get_string_list(c, "data.tags"), (std::vector<std::string>{"run"}));  // lists replace, never append
  EXPECT_EQ(get_string(c, "precision"), "bf16-mixed");                            // hardware profile
  EXPECT_EQ(get_string(c, "schedule"), "constant");                               // a scalar replaces base.yaml's map
  EXPECT_FALSE(c.has("schedule.name"));
  EXPECT_EQ(c.name(), run_file);
  EXPECT_EQ(c.sources(), (std::vector<std::string>{common_file, base_file, profile_file, run_file}));
}

TEST(ConfigLoad, IncludeKeysDoNotRemainAsLeaves) {
  const Config c = Config::load(run_file);
  EXPECT_FALSE(c.has("experiment"));
  EXPECT_FALSE(c.has("hardware_profile"));
  EXPECT_EQ(c.leaf_keys(), (std::vector<std::string>{"data.batch_size", "data.tags", "data.workers",
                                                     "model.args.hidden", "model.dropout", "model.name", "optim.lr",
                                                     "optim.momentum", "optim.name", "precision", "schedule", "seed"}));
  EXPECT_EQ(c.to_yaml().find("experiment"), std::string::npos);
  Config validated = c;
  EXPECT_NO_THROW(test_support::test_schema().validate(validated));
}

TEST(ConfigLoad, OriginsNameTheFileAndLineThatSetEachValue) {
  const Config c = Config::load(run_file);
  EXPECT_EQ(c.origin("optim.lr").str(), run_file + ":5:3");
  EXPECT_EQ(c.origin("optim.name").str(), base_file + ":7:3");
  EXPECT_EQ(c.origin("data.batch_size").str(), profile_file + ":4:3");
  EXPECT_EQ(c.origin("seed").str(), common_file + ":2:1");
  EXPECT_EQ(c.origin("schedule").str(), run_file + ":8:1");
  EXPECT_EQ(c.origin("data.tags").str(), run_file + ":7:3");
}

TEST(ConfigLoad, ParseComposesRelativeToTheDirectoryOfItsName) {
  const Config c = Config::parse("experiment: experiments/base.yaml\nseed: 3\n", kDataDir + "/inline.yaml");
  EXPECT_EQ(get_int(c, "seed"), 3);
  EXPECT_EQ(get_string(c, "model.name"), "mlp");
  EXPECT_EQ(c.sources(), (std::vector<std::string>{common_file, base_file, kDataDir + "/inline.yaml"}));
}

TEST(ConfigLoad, IncludeCycleIsAConfigError) {
  const Error e = error_from([] { Config::load(kDataDir + "/cycle_a.yaml"); });
  EXPECT_EQ(e.kind(), ErrorKind::kConfig);
  EXPECT_EQ(e.message(), kDataDir + "/cycle_b.yaml:2:1: include cycle: " + kDataDir + "/cycle_a.yaml -> " + kDataDir +
                             "/cycle_b.yaml -> " + kDataDir + "/cycle_a.yaml");
}

TEST(ConfigLoad, SelfIncludeIsACycle) {
  const Error e = error_from([] { Config::load(kDataDir + "/self_include.yaml"); });
  EXPECT_EQ(e.kind(), ErrorKind::kConfig);
  const std::string self = kDataDir + "/self_include.yaml";
  EXPECT_EQ(e.message(), self + ":2:1: include cycle: " + self + " -> " + self);
}

TEST(ConfigLoad, SameFileTwiceWithoutACycleIsFine) {
  // run.yaml names base.yaml, which names common.yaml; an inline file naming common.yaml as its profile too
  // includes it twice, in two branches: a diamond, not a cycle.
  const Config c = Config::parse("experiment: experiments/base.yaml\nhardware_profile: experiments/common.yaml\n",
                                 kDataDir + "/diamond.yaml");
  EXPECT_EQ(get_string(c, "model.name"), "base");  // the profile (common.yaml) sits above the experiment
}

TEST(ConfigLoad, MissingIncludeNamesThePathAndTheFileThatNamedIt) {
  const Error e = error_from([] { Config::load(kDataDir + "/missing_include.yaml"); });
  EXPECT_EQ(e.kind(), ErrorKind::kConfig);
  EXPECT_EQ(e.message(), "config file '" + kDataDir + "/profiles/no_such_profile.yaml' not found (named by " +
                             "'hardware_profile' at " + kDataDir + "/missing_include.yaml:2:1)");
}

TEST(ConfigLoad, MissingFileNamesThePath) {
  const Error e = error_from([] { Config::load(kDataDir + "/nope.yaml"); });
  EXPECT_EQ(e.kind(), ErrorKind::kConfig);
  EXPECT_EQ(e.message(), "config file '" + kDataDir + "/nope.yaml' not found");
  EXPECT_EQ(error_from([] { Config::load(kDataDir); }).kind(), ErrorKind::kConfig);  // a directory
}

TEST(ConfigLoad, SyntaxErrorNamesFileLineAndColumn) {
  const Error e = error_from([] { Config::load(kDataDir + "/bad_syntax.yaml"); });
  EXPECT_EQ(e.kind(), ErrorKind::kConfig);
  EXPECT_EQ(e.message(), kDataDir + "/bad_syntax.yaml:4:13: YAML syntax error: end of sequence flow not found");
}

TEST(ConfigLoad, SyntaxErrorInAnIncludedFileSaysWhoNamedIt) {
  const Error e = error_from([] { Config::load(kDataDir + "/includes_bad_syntax.yaml"); });
  EXPECT_EQ(e.kind(), ErrorKind::kConfig);
  EXPECT_EQ(e.message(), kDataDir + "/bad_syntax.yaml:4:13: YAML syntax error: end of sequence flow not found " +
                             "(named by 'experiment' at " + kDataDir + "/includes_bad_syntax.yaml:2:1)");
}

TEST(ConfigLoad, SyntaxErrorInParsedText) {
  const Error e = error_from([] { Config::parse("a: 1\nb: [\n", "inline.yaml"); });
  EXPECT_EQ(e.kind(), ErrorKind::kConfig);
  EXPECT_TRUE(e.message().starts_with("inline.yaml:3:1: YAML syntax error: ")) << e.message();
}

TEST(ConfigLoad, DuplicateAndDottedKeysAreErrors) {
  const Error e = error_from([] { Config::parse("optim:\n  lr: 1\n  lr: 2\noptim.lr: 3\n", "run.yaml"); });
  EXPECT_EQ(e.kind(), ErrorKind::kConfig);
  EXPECT_EQ(e.message(),
            "2 configuration problems:\n"
            "run.yaml:3:3: duplicate key 'optim.lr' (first set at run.yaml:2:3)\n"
            "run.yaml:4:1: key 'optim.lr' contains '.' or is empty; nest it instead (a: {b: ...})");
}

TEST(ConfigLoad, TopLevelMustBeAMapping) {
  Error e = error_from([] { Config::parse("- a\n- b\n", "list.yaml"); });
  EXPECT_EQ(e.kind(), ErrorKind::kConfig);
  EXPECT_EQ(e.message(), "list.yaml:1:1: expected a mapping of keys at the top level, got a list");
  EXPECT_TRUE(Config::parse("", "empty.yaml").leaf_keys().empty());
  EXPECT_TRUE(Config::parse("# only a comment\n", "empty.yaml").leaf_keys().empty());
}

TEST(ConfigLoad, IncludeValueMustBeAFileName) {
  const Error e = error_from([] { Config::parse("seed: 1\nexperiment: [a.yaml]\n", "run.yaml"); });
  EXPECT_EQ(e.kind(), ErrorKind::kConfig);
  EXPECT_EQ(e.message(), "run.yaml:2:1: 'experiment' must name a YAML file, got a list");
}

}  // namespace
}  // namespace bellows::config
