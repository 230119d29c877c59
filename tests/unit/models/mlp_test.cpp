// The MLP (W1): output shapes and layer structure for each norm, float64 gradients against central
// differences, dropout only in training mode, and learning a synthetic regression through the registered
// model's task.
#include "bellows/models/mlp.h"

#include <ATen/ATen.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <torch/optim/adam.h>

#include <string>
#include <vector>

#include "bellows/data/batch.h"
#include "bellows/models/registry.h"
#include "bellows/util/error.h"
#include "model_test_util.h"
#include "test_util.h"

namespace bellows::models {
namespace {

using test_support::build_model;
using test_support::error_from;
using test_support::expect_gradients_match;
using test_support::OneThread;
using Sizes = std::vector<std::int64_t>;

MlpOptions tiny_mlp(const std::string& norm, double dropout = 0.0) {
  MlpOptions o;
  o.in_features = 5;
  o.hidden = {7, 6};
  o.out_features = 3;
  o.norm = norm;
  o.dropout = dropout;
  return o;
}

TEST(MlpModel, OutputShapesAndParameterNames) {
  for (const std::string norm : {"none", "layer", "batch"}) {
    Mlp model(tiny_mlp(norm));
    EXPECT_EQ(model->forward(at::randn({4, 5})).sizes(), (Sizes{4, 3})) << norm;
    // Extra leading dimensions pass through (Linear acts on the last one); BatchNorm1d needs [B, C].
    if (norm != "batch") EXPECT_EQ(model->forward(at::randn({2, 4, 5})).sizes(), (Sizes{2, 4, 3})) << norm;
    // Linear layers at 0, 2|3, ... : 3 weights and 3 biases, plus 2 x 2 norm parameters.
    const std::size_t expected = norm == "none" ? 6 : 10;
    EXPECT_EQ(model->parameters().size(), expected) << norm;
    std::int64_t count = 0;
    for (const auto& p : model->parameters()) count += p.numel();
    const std::int64_t linear = (5 * 7 + 7) + (7 * 6 + 6) + (6 * 3 + 3);
    EXPECT_EQ(count, linear + (norm == "none" ? 0 : 2 * (7 + 6))) << norm;
  }
}

TEST(MlpModel, GradientsMatchFiniteDifferencesFloat64) {
  torch::manual_seed(4);
  for (const std::string norm : {"none", "layer", "batch"}) {
    for (const std::string activation : {"gelu", "tanh", "silu", "relu"}) {  // relu runs in place
      MlpOptions o = tiny_mlp(norm);
      o.activation = activation;
      Mlp model(o);
      model->to(at::kDouble);
      // BatchNorm in evaluation mode (running statistics): in training mode its statistics would change with
      // every evaluation of f.
      model->train(norm != "batch");
      const at::Tensor x = at::randn({4, 5}, at::kDouble).requires_grad_(true);
      const at::Tensor w = at::randn({4, 3}, at::kDouble);
      auto f = [&] { return (model->forward(x) * w).sum(); };
      std::vector<at::Tensor> tensors{x};
      for (const auto& p : model->parameters()) tensors.push_back(p);
      SCOPED_TRACE(norm + " " + activation);
      EXPECT_GT(expect_gradients_match(f, tensors, 4), 1e-3);
    }
  }
}

TEST(MlpModel, DropoutActsOnlyInTraining) {
  torch::manual_seed(5);
  Mlp model(tiny_mlp("none", 0.5));
  const at::Tensor x = at::randn({64, 5});
  model->eval();
  EXPECT_TRUE(at::equal(model->forward(x), model->forward(x)));
  model->train();
  EXPECT_FALSE(at::equal(model->forward(x), model->forward(x)));
}

TEST(MlpModel, BadOptionsAreConfigErrors) {
  MlpOptions o = tiny_mlp("none");
  o.norm = "group";
  EXPECT_EQ(error_from([&] { Mlp m(o); }).kind(), ErrorKind::kConfig);
  o = tiny_mlp("none");
  o.hidden = {7, 0};
  const Error e = error_from([&] { Mlp m(o); });
  EXPECT_EQ(e.kind(), ErrorKind::kConfig);
  EXPECT_THAT(e.message(), ::testing::HasSubstr("hidden width 0"));
}

// y = sin(x0) * x1 + 0.5 x2^2 over x ~ U(-2, 2)^4 (the fourth feature is noise). Predicting the mean scores the
// target's variance (about 1.4); after 300 Adam steps (lr 3e-3, batch 64, widths [64, 64]) the MSE on 512 unseen
// points must be below 0.05 (seed 9 measured 0.011).
TEST(MlpModel, LearnsASmoothFunctionBelow0p05In300Steps) {
  const OneThread one_thread;
  torch::manual_seed(9);
  BuiltModel built = build_model("model: {name: mlp, in_features: 4, hidden: [64, 64], out_features: 1, activation: gelu}\n");
  torch::optim::Adam optimizer(built.module->parameters(), torch::optim::AdamOptions(3e-3));
  auto make_batch = [](std::int64_t n) {
    const at::Tensor x = at::rand({n, 4}) * 4 - 2;
    const at::Tensor y = (x.select(1, 0).sin() * x.select(1, 1) + 0.5 * x.select(1, 2).square()).unsqueeze(1);
    data::Batch b;
    b.size = n;
    b.tensors = {{"x", x}, {"y", y}};
    return b;
  };
  for (int step = 0; step < 300; ++step) {
    optimizer.zero_grad();
    built.task->step(*built.module, make_batch(64)).loss.backward();
    optimizer.step();
  }
  built.module->eval();
  at::NoGradGuard no_grad;
  const data::Batch test = make_batch(512);
  const double loss = built.task->step(*built.module, test).loss.item<double>();
  const double variance = test.at("y").var().item<double>();
  EXPECT_GT(variance, 1.0);
  EXPECT_LT(loss, 0.05) << "variance " << variance;
}

}  // namespace
}  // namespace bellows::models
