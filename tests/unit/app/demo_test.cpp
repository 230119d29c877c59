// The embedded demo follows model.name (app/schema.h: demo_config): the default demo is the MLP's as it always
// was (README.md's numbers are its run), another model gets its own data and sizes and none of the MLP's keys, the
// plan says which demo ran, and a model without a demo is a named error.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <torch/nn/modules/linear.h>

#include "bellows/app/schema.h"
#include "bellows/models/registry.h"
#include "bellows/models/tasks.h"
#include "test_util.h"
#include "test_paths.h"

namespace bellows::app {
namespace {

using test_support::error_from;
using ::testing::HasSubstr;

// A model registered without a demo, as a C++ user's may be.
models::ModelEntry demo_less_entry() {
  models::ModelEntry e;
  e.name = "demo_less_probe";
  e.help = "test model without an embedded demo";
  e.add_keys = [](config::Schema&) {};
  e.build = [](const config::Config&, const models::ModelContext&) {
    auto linear = std::make_shared<torch::nn::LinearImpl>(4, 1);
    models::Forward forward = [](torch::nn::Module& m, const at::Tensor& x) {
      return static_cast<torch::nn::LinearImpl&>(m).forward(x);
    };
    return models::BuiltModel{linear, models::make_regression_task(forward)};
  };
  return e;
}
const models::ModelRegistrar kDemoLessRegistered(demo_less_entry());

const config::Config::PlanNote* demo_note(const config::Config& c) {
  for (const auto& n : c.plan_notes()) {
    if (n.key == "demo") return &n;
  }
  return nullptr;
}

TEST(Demo, TheDefaultDemoIsTheMlpDemoAsBefore) {
  const config::Config now = resolve_config(std::nullopt, {});
  // The demo before it followed model.name, word for word.
  const config::Config before = resolve_config(std::string(BELLOWS_TEST_DATA_DIR) + "/config/demo_mlp.yaml", {});
  EXPECT_EQ(now.to_yaml(), before.to_yaml());
  EXPECT_EQ(resolve_config(std::nullopt, {"model.name=mlp"}).to_yaml(), before.to_yaml());
  // train.epochs stays the demo's, not a choice of the user's (train.max_steps alone trains to max_steps).
  EXPECT_EQ(now.origin("train.epochs").file, kDemoName);
  const auto* note = demo_note(now);
  ASSERT_NE(note, nullptr);
  EXPECT_EQ(note->value, "regression");
  EXPECT_THAT(note->reason, HasSubstr("embedded demo of model mlp trains on a synthetic regression table"));
}

TEST(Demo, AnotherModelGetsItsOwnDataAndNoneOfTheMlpKeys) {
  const config::Config c = resolve_config(std::nullopt, {"model.name=transformer", "model.d_model=32"});
  EXPECT_FALSE(c.has("model.hidden"));  // the MLP's key, unknown to the transformer
  EXPECT_EQ(c.node("data.kind").as<std::string>(), "sequences");
  EXPECT_EQ(c.node("model.d_model").as<int>(), 32);       // the command line over the demo
  EXPECT_EQ(c.node("model.heads").as<int>(), 4);          // the demo's size
  EXPECT_TRUE(c.is_schema_default("model.in_features"));  // left to the data
  EXPECT_EQ(c.node("name").as<std::string>(), "demo-transformer");
  EXPECT_EQ(c.node("optim.lr").as<double>(), 0.002);  // the common part
  const auto* note = demo_note(c);
  ASSERT_NE(note, nullptr);
  EXPECT_EQ(note->value, "sequences");
  EXPECT_THAT(note->reason, HasSubstr("embedded demo of model transformer trains on synthetic sequences"));
  EXPECT_THAT(note->reason, HasSubstr("widths and class counts it does not set are the data's"));
  // A model map names the model too.
  EXPECT_EQ(resolve_config(std::nullopt, {"model={name: gru}"}).node("data.kind").as<std::string>(), "sequences");
}

TEST(Demo, AScriptedModelTrainsOnTheMlpDemosTable) {
  const config::Config c = resolve_config(std::nullopt, {"model.name=torchscript", "model.path=m.pt"});
  EXPECT_EQ(c.node("data.kind").as<std::string>(), "regression");
  EXPECT_EQ(c.node("data.features").as<int>(), 64);
  EXPECT_FALSE(c.has("model.in_features"));
  EXPECT_THAT(demo_note(c)->reason, HasSubstr("the MLP demo's synthetic regression table"));
}

TEST(Demo, EveryModelWithADemoValidates) {
  for (const auto& entry : models::registry()) {
    if (entry.demo.yaml.empty()) continue;  // test models (the e2e test trains every model of the CLI)
    std::vector<std::string> args{"model.name=" + entry.name};
    if (entry.name == "torchscript") args.push_back("model.path=m.pt");
    const config::Config c = resolve_config(std::nullopt, args);
    EXPECT_EQ(c.node("data.source").as<std::string>(), "synthetic") << entry.name;
    EXPECT_EQ(c.node("model.name").as<std::string>(), entry.name);
    ASSERT_NE(demo_note(c), nullptr) << entry.name;
    EXPECT_THAT(demo_note(c)->reason, HasSubstr(entry.demo.data)) << entry.name;
  }
}

TEST(Demo, AModelWithoutADemoOrAnUnknownOneIsANamedError) {
  const Error none = error_from([] { resolve_config(std::nullopt, {"model.name=demo_less_probe"}); });
  EXPECT_EQ(none.kind(), ErrorKind::kConfig);
  EXPECT_THAT(none.message(), HasSubstr("model demo_less_probe has no embedded demo"));
  EXPECT_THAT(none.hint(), HasSubstr("give a config file"));
  const Error unknown = error_from([] { resolve_config(std::nullopt, {"model.name=transfomer"}); });
  EXPECT_EQ(unknown.kind(), ErrorKind::kConfig);
  EXPECT_THAT(unknown.message() + unknown.hint(), HasSubstr("transformer"));
}

}  // namespace
}  // namespace bellows::app
