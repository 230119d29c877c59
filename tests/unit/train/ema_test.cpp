// EMA: the average after a few updates against float64 arithmetic, every_n_steps and start_step, buffers
// copied rather than averaged, swap() twice restoring both sides exactly, and the state dict.
#include "bellows/train/ema.h"

#include <ATen/ATen.h>
#include <c10/core/GradMode.h>
#include <gtest/gtest.h>

#include "bellows/util/error.h"

namespace bellows::train {
namespace {

using Named = std::vector<std::pair<std::string, at::Tensor>>;

struct Model {
  at::Tensor weight = at::randn({4, 3}).requires_grad_(true);
  at::Tensor bias = at::randn({4}).requires_grad_(true);
  at::Tensor running_mean = at::randn({4});                                  // a float buffer
  at::Tensor batches = at::zeros({}, at::TensorOptions().dtype(at::kLong));  // an integer buffer
  Named named() const {
    return {{"weight", weight}, {"bias", bias}, {"bn.running_mean", running_mean}, {"bn.num_batches", batches}};
  }
  // What a training step does to the tensors: new weights, new running statistics, one more batch.
  void train_step(double shift) {
    c10::NoGradGuard no_grad;
    weight.add_(at::randn_like(weight) + shift);
    bias.add_(shift);
    running_mean.add_(1.0);
    batches.add_(1);
  }
};

at::Tensor value(const Ema& ema, const std::string& name) {
  for (const auto& [n, t] : ema.averaged()) {
    if (n == name) return t;
  }
  ADD_FAILURE() << "no EMA tensor " << name;
  return {};
}

TEST(Ema, AverageMatchesFormulaAndBuffersAreCopied) {
  Model m;
  Ema ema(m.named(), {.decay = 0.9});
  at::Tensor expected = m.weight.detach().to(at::kDouble);
  for (int step = 1; step <= 4; ++step) {
    m.train_step(0.5);
    ema.update(step);
    expected = 0.9 * expected + 0.1 * m.weight.detach().to(at::kDouble);
  }
  EXPECT_EQ(ema.updates(), 4);
  EXPECT_EQ(value(ema, "weight").scalar_type(), at::kFloat);
  EXPECT_TRUE(at::allclose(value(ema, "weight").to(at::kDouble), expected, 1e-6, 1e-7));
  EXPECT_FALSE(at::allclose(value(ema, "weight"), m.weight)) << "the average lags the weights";
  EXPECT_TRUE(value(ema, "bn.running_mean").equal(m.running_mean)) << "buffers are copied, not averaged";
  EXPECT_EQ(value(ema, "bn.num_batches").item<std::int64_t>(), 4);
  EXPECT_EQ(value(ema, "bn.num_batches").scalar_type(), at::kLong);
}

// The device flag of a skipped optimizer step leaves the average exactly as it was (no sync); a flag of 0 is
// exactly the unflagged update.
TEST(Ema, SkippedFlagLeavesTheAverageUnchanged) {
  Model m;
  Model twin = m;
  twin.weight = m.weight.detach().clone().requires_grad_(true);
  twin.bias = m.bias.detach().clone().requires_grad_(true);
  twin.running_mean = m.running_mean.clone();
  twin.batches = m.batches.clone();
  Ema flagged(m.named(), {.decay = 0.9}), plain(twin.named(), {.decay = 0.9});
  for (int step = 1; step <= 3; ++step) {
    at::manual_seed(step);
    m.train_step(0.5);
    at::manual_seed(step);
    twin.train_step(0.5);
    flagged.update(step, at::zeros({}, at::kFloat));
    plain.update(step);
  }
  EXPECT_TRUE(value(flagged, "weight").equal(value(plain, "weight")));
  const at::Tensor held = value(flagged, "weight").clone();
  flagged.update(4, at::ones({}, at::kFloat));
  EXPECT_TRUE(value(flagged, "weight").equal(held)) << "a skipped step moved the average";
}

TEST(Ema, EveryNStepsAndStartStep) {
  Model m;
  Ema ema(m.named(), {.decay = 0.5, .every_n_steps = 2, .start_step = 4});
  for (int step = 1; step <= 3; ++step) {
    m.train_step(1.0);
    ema.update(step);
    EXPECT_TRUE(value(ema, "weight").equal(m.weight.detach())) << "before start_step the EMA copies: step " << step;
  }
  EXPECT_EQ(ema.updates(), 0);
  const at::Tensor before = value(ema, "bias").clone();
  m.train_step(1.0);
  ema.update(4);  // averages: 4 >= start_step and 4 % 2 == 0
  EXPECT_TRUE(at::allclose(value(ema, "bias"), 0.5 * before + 0.5 * m.bias.detach()));
  const at::Tensor after4 = value(ema, "bias").clone();
  m.train_step(1.0);
  ema.update(5);  // odd step: no update
  EXPECT_TRUE(value(ema, "bias").equal(after4));
  m.train_step(1.0);
  ema.update(6);
  EXPECT_TRUE(at::allclose(value(ema, "bias"), 0.5 * after4 + 0.5 * m.bias.detach()));
  EXPECT_EQ(ema.updates(), 2);
}

TEST(Ema, ReducedPrecisionWeightsAveragedInFp32) {
  at::Tensor w = at::randn({64}).to(at::kBFloat16).requires_grad_(true);
  Ema ema({{"w", w}}, {.decay = 0.99});
  const at::Tensor start = w.detach().to(at::kFloat);
  {
    c10::NoGradGuard no_grad;
    w.add_(0.25);
  }
  ema.update(1);
  // 0.99 * x + 0.01 * (x + 0.25) moves by 0.0025: lost to bf16 rounding, kept in fp32.
  EXPECT_EQ(value(ema, "w").scalar_type(), at::kFloat);
  EXPECT_TRUE(at::allclose(value(ema, "w"), 0.99 * start + 0.01 * w.detach().to(at::kFloat), 1e-5, 1e-6));
  EXPECT_FALSE(value(ema, "w").equal(start));
}

TEST(Ema, SwapTwiceRestoresBothSides) {
  Model m;
  at::Tensor half = at::randn({8}).to(at::kBFloat16).requires_grad_(true);  // narrower than its EMA copy
  Named named = m.named();
  named.emplace_back("half", half);
  Ema ema(named, {.decay = 0.9});
  for (int step = 1; step <= 3; ++step) {
    m.train_step(0.3);
    {
      c10::NoGradGuard no_grad;
      half.add_(0.1);
    }
    ema.update(step);
  }
  m.running_mean.add_(5.0);  // a buffer changed after the last update (an eval would not, but be strict)
  std::map<std::string, at::Tensor> live, avg;
  for (const auto& [n, t] : named) live[n] = t.detach().clone();
  for (const auto& [n, t] : ema.averaged()) avg[n] = t.clone();

  ema.swap();
  EXPECT_TRUE(ema.swapped());
  for (const auto& [n, t] : named) {
    EXPECT_TRUE(t.detach().equal(avg[n].to(t.scalar_type()))) << "swapped in: " << n;
  }
  for (const auto& [n, t] : ema.averaged()) EXPECT_TRUE(t.equal(avg[n])) << "still the EMA values: " << n;
  EXPECT_THROW(ema.update(4), Error);

  ema.swap();
  EXPECT_FALSE(ema.swapped());
  for (const auto& [n, t] : named) EXPECT_TRUE(t.detach().equal(live[n])) << "restored: " << n;
  for (const auto& [n, t] : ema.averaged()) EXPECT_TRUE(t.equal(avg[n])) << "EMA intact: " << n;

  // Averaging goes on into the EMA tensors the swaps left (the update's bucket plan is rebuilt after a swap).
  m.train_step(0.3);
  ema.update(4);
  const at::Tensor expected = 0.9 * avg["weight"].to(at::kDouble) + 0.1 * m.weight.detach().to(at::kDouble);
  EXPECT_TRUE(value(ema, "weight").to(at::kDouble).allclose(expected, 1e-6, 1e-7));
  EXPECT_TRUE(value(ema, "bn.running_mean").equal(m.running_mean)) << "buffers still copied";
}

TEST(Ema, StateDictRoundTripAndErrors) {
  Model m;
  Ema ema(m.named(), {.decay = 0.8});
  for (int step = 1; step <= 3; ++step) {
    m.train_step(0.2);
    ema.update(step);
  }
  StateDict saved;
  for (const auto& [k, v] : ema.state_dict()) saved[k] = v.clone();
  EXPECT_EQ(saved.size(), 5u);  // four tensors and the update count

  Model fresh_model;
  Ema fresh(fresh_model.named(), {.decay = 0.8});
  fresh.load_state_dict(saved);
  EXPECT_EQ(fresh.updates(), 3);
  for (const auto& [n, t] : ema.averaged()) EXPECT_TRUE(value(fresh, n).equal(t)) << n;

  auto expect_data_error = [&](const StateDict& sd, const std::string& needle) {
    try {
      fresh.load_state_dict(sd);
      ADD_FAILURE() << "no error for " << needle;
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::kData);
      EXPECT_NE(e.message().find(needle), std::string::npos) << e.message();
    }
  };
  StateDict missing = saved;
  missing.erase("weights.bias");
  expect_data_error(missing, "'weights.bias'");
  StateDict wrong = saved;
  wrong["weights.weight"] = at::zeros({3, 4});
  expect_data_error(wrong, "'weights.weight' has shape [3, 4]");
  StateDict extra = saved;
  extra["weights.gone"] = at::zeros({1});
  expect_data_error(extra, "'weights.gone'");
}

TEST(Ema, TiedWeightsTrackedOnceAndOptionsValidated) {
  Model m;
  Named named = m.named();
  named.emplace_back("head.weight", m.weight);  // the same tensor again
  Ema ema(named, {});
  EXPECT_EQ(ema.averaged().size(), 4u);
  try {
    Ema bad(m.named(), {.decay = 1.5});
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kConfig);
    EXPECT_NE(e.message().find("ema.decay is 1.5"), std::string::npos) << e.message();
  }
  EXPECT_THROW(Ema(m.named(), {.every_n_steps = 0}), Error);
}

}  // namespace
}  // namespace bellows::train
