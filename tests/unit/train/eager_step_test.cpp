// The eager step (train/eager_step.h) on its own, with the parts a trainer would hand it: k loaded batches give the
// gradient of one batch of their samples; a step's results (outputs, units, samples, the gradient report) and phases;
// non-finite gradients skip the update on the device; clipping bounds the update and reports the norm before it.
#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <limits>
#include <numeric>

#include "bellows/dist/strategy.h"
#include "bellows/precision/precision.h"
#include "bellows/train/anomaly.h"
#include "bellows/train/eager_step.h"
#include "bellows/util/error.h"
#include "bellows/util/module_tensors.h"
#include "trainer_fixtures.h"

namespace bellows::train {
namespace eager_step_test {

using namespace test;  // trainer_fixtures.h

// A model, its optimizer and what an EagerStep works with, as the trainer sets them up.
struct Bench {
  explicit Bench(std::uint64_t seed, TrainerOptions o = sgd_options()) : model(make_mlp(seed)), options(std::move(o)) {
    optimizer = std::make_unique<Optimizer>(bellows::named_parameters(*model), options.optimizer);
    params = optimizer->parameters();
  }
  StepParts parts() {
    return StepParts{*model, *task, *policy, *optimizer, strategy, options, params, clock, split,
                     [this](const std::string& text) { messages.push_back(text); }};
  }
  StepResult step(const std::map<std::string, at::Tensor>& data, std::int64_t batch, std::int64_t batches) {
    auto s = source(data, batch);
    s.start_epoch(0);
    StepBatches loaded(s, batches, 1, clock);
    EagerStep eager(parts());
    return eager.run(loaded);
  }

  std::shared_ptr<models::MlpImpl> model;
  std::shared_ptr<Task> task = regression();
  std::unique_ptr<precision::Precision> policy = precision::make_precision("fp32", c10::Device(c10::kCPU));
  TrainerOptions options;
  dist::SingleDevice strategy;
  std::unique_ptr<Optimizer> optimizer;
  std::vector<at::Tensor> params;
  obs::PhaseClock clock{c10::Device(c10::kCPU)};
  MicroSplit split;
  std::vector<std::string> messages;
};

TEST(EagerStep, KLoadedBatchesGiveTheGradientOfOneBatchOfTheirSamples) {
  const auto data = dataset(64);
  Bench four(1), one(1);
  const StepResult r = four.step(data, 16, 4);
  one.step(data, 64, 1);
  EXPECT_LT(max_rel_diff(params_of(*four.model), params_of(*one.model)), 1e-6);
  EXPECT_EQ(r.outputs.size(), 4u);
  EXPECT_EQ(r.units.size(), 4u);
  EXPECT_EQ(r.samples, 64);
  EXPECT_FALSE(r.repeated);
  EXPECT_EQ(r.gradients.skipped.item<float>(), 0.0f);
  EXPECT_EQ(r.gradients.owners.size(), four.params.size()) << "every parameter had a gradient";
  EXPECT_EQ(r.gradients.param_norms.numel(), static_cast<std::int64_t>(four.params.size()));
  EXPECT_EQ(four.clock.last(), obs::Phase::kBackward) << "the optimizer phase is the loop's to lap";
  for (const auto& p : four.params) EXPECT_FALSE(p.grad().defined()) << "zero_grad after the update";
  // A step over the first 16 samples alone is another update: the test can fail.
  Bench first(1);
  first.step(data, 16, 1);
  EXPECT_GT(max_rel_diff(params_of(*four.model), params_of(*first.model)), 1e-4);
}

TEST(EagerStep, NonFiniteGradientsSkipTheUpdateOnTheDevice) {
  auto data = dataset(16);
  data["x"][3][2] = std::nan("");
  Bench b(2);
  const auto before = params_of(*b.model);
  const StepResult r = b.step(data, 16, 1);
  EXPECT_EQ(r.gradients.skipped.item<float>(), 1.0f);
  EXPECT_FALSE(std::isfinite(r.gradients.norm.item<double>()));
  EXPECT_FALSE(r.gradients.param_norms.isfinite().all().item<bool>()) << "the record names the parameter from these";
  const auto after = params_of(*b.model);
  for (std::size_t i = 0; i < after.size(); ++i) EXPECT_TRUE(after[i].equal(before[i])) << "parameter " << i;
  EXPECT_EQ(b.policy->skipped_steps(), 1);
}

TEST(EagerStep, ClippingBoundsTheUpdateAndReportsTheNormBeforeIt) {
  const auto data = dataset(32);
  TrainerOptions o = sgd_options();
  o.optimizer.lr = 1.0;
  o.clip_max_norm = 1e-3;
  Bench clipped(3, o), unclipped(3, sgd_options());
  const auto before = params_of(*clipped.model);
  const StepResult r = clipped.step(data, 32, 1);
  const StepResult f = unclipped.step(data, 32, 1);
  EXPECT_GT(r.gradients.norm.item<double>(), 1e-2) << "the norm before clipping";
  EXPECT_NEAR(r.gradients.norm.item<double>(), f.gradients.norm.item<double>(), 1e-6 * f.gradients.norm.item<double>());
  double squares = 0;  // SGD without momentum at lr 1: the update is the clipped gradient
  const auto after = params_of(*clipped.model);
  for (std::size_t i = 0; i < after.size(); ++i) squares += (after[i] - before[i]).pow(2).sum().item<double>();
  EXPECT_NEAR(std::sqrt(squares), 1e-3, 1e-6);
}

// detect_anomaly reads the per-parameter norms the step clips by (under sharded gradients every rank has every one):
// the first non-finite one is named.
TEST(EagerStep, ShardedGradientsNameTheFirstParameterWhoseNormIsNotFinite) {
  Bench b(3);
  const NamedTensors named = bellows::named_parameters(*b.model);
  ASSERT_GE(b.params.size(), 3u);
  at::Tensor norms = at::ones({static_cast<std::int64_t>(b.params.size())});
  std::vector<std::int32_t> all(b.params.size());
  std::iota(all.begin(), all.end(), 0);
  EXPECT_NO_THROW(check_gradient_norms(*b.model, b.params, norms, all, *b.policy, 7));
  norms[2] = std::numeric_limits<float>::infinity();
  norms[1] = std::numeric_limits<float>::quiet_NaN();
  std::string name;
  for (const auto& [n, p] : named) {
    if (p.is_same(b.params[1])) name = n;
  }
  ASSERT_FALSE(name.empty());
  try {
    check_gradient_norms(*b.model, b.params, norms, all, *b.policy, 7);
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kData);
    EXPECT_NE(std::string(e.what()).find("optimizer step 7: " + name + " (gradient norm nan"), std::string::npos) << e.what();
  }
}

}  // namespace eager_step_test
}  // namespace bellows::train
