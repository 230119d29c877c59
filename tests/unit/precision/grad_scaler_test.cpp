// GradScaler behaviour beyond the golden sequence: skipped steps leave parameters and optimizer state alone,
// growth after the interval, unscale_ once per step, clipping sees true norms, state round trip, bad input.
#include "bellows/precision/grad_scaler.h"

#include <ATen/ATen.h>
#include <ATen/core/grad_mode.h>
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "bellows/util/error.h"

namespace bellows::precision {
namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();
constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

at::Tensor param(std::vector<float> values) {
  return at::tensor(values).requires_grad_(true);
}

void set_grad(const at::Tensor& p, const at::Tensor& g) {
  p.mutable_grad() = g.clone();
}

// A tiny SGD with momentum: enough optimizer state to show that a skipped step does not touch it.
struct MomentumSgd {
  double lr = 0.1;
  double momentum = 0.9;
  std::vector<at::Tensor> buffers;
  int steps = 0;

  void step(const std::vector<at::Tensor>& params) {
    at::NoGradGuard no_grad;
    if (buffers.empty()) {
      for (const auto& p : params) buffers.push_back(at::zeros_like(p));
    }
    for (std::size_t i = 0; i < params.size(); ++i) {
      buffers[i].mul_(momentum).add_(params[i].grad());
      params[i].sub_(buffers[i] * lr);
    }
    ++steps;
  }
};

GradScalerOptions with_interval(std::int64_t interval) {
  GradScalerOptions o;
  o.growth_interval = interval;
  return o;
}

// One full scaled step with gradients `true_grad * scale` (plus an optional injected value at element 0).
bool scaled_step(GradScaler& scaler, const std::vector<at::Tensor>& params, const std::function<void()>& opt,
                 std::optional<float> inject = std::nullopt) {
  const double s = scaler.get_scale();
  for (const auto& p : params) {
    at::Tensor g = at::full_like(p, 0.01) * s;
    if (inject) g.view({-1})[0] = *inject;
    set_grad(p, g);
  }
  const bool stepped = scaler.step(params, opt);
  scaler.update();
  return stepped;
}

TEST(GradScaler, DefaultsArePyTorchs) {
  GradScaler scaler;
  EXPECT_EQ(scaler.get_scale(), 65536.0);
  EXPECT_EQ(scaler.options().growth_factor, 2.0);
  EXPECT_EQ(scaler.options().backoff_factor, 0.5);
  EXPECT_EQ(scaler.options().growth_interval, 2000);
  EXPECT_TRUE(scaler.is_enabled());
  const at::Tensor scaled = scaler.scale(at::scalar_tensor(3.0f));
  EXPECT_EQ(scaled.item<double>(), 3.0 * 65536.0);
}

TEST(GradScaler, NonFiniteGradientSkipsBacksOffAndLeavesParamsAndOptimizerStateUntouched) {
  for (const float bad : {kInf, -kInf, kNaN}) {
    SCOPED_TRACE(bad);
    GradScaler scaler;
    std::vector<at::Tensor> params = {param({1, 2, 3}), param({-4, 5})};
    MomentumSgd sgd;
    auto opt = [&] { sgd.step(params); };
    ASSERT_TRUE(scaled_step(scaler, params, opt));  // a clean step first, so that the momentum is not zero
    ASSERT_EQ(sgd.steps, 1);
    const std::vector<at::Tensor> params_before = {params[0].detach().clone(), params[1].detach().clone()};
    const std::vector<at::Tensor> momentum_before = {sgd.buffers[0].clone(), sgd.buffers[1].clone()};
    ASSERT_FALSE(momentum_before[0].eq(0).all().item<bool>());

    EXPECT_FALSE(scaled_step(scaler, params, opt, bad));
    EXPECT_EQ(sgd.steps, 1);
    EXPECT_TRUE(scaler.last_step_skipped());
    EXPECT_EQ(scaler.skipped_steps(), 1);
    EXPECT_EQ(scaler.get_scale(), 32768.0);
    EXPECT_EQ(scaler.growth_tracker(), 0);
    for (std::size_t i = 0; i < params.size(); ++i) {
      EXPECT_TRUE(params[i].detach().equal(params_before[i]));
      EXPECT_TRUE(sgd.buffers[i].equal(momentum_before[i]));
    }
    EXPECT_TRUE(scaled_step(scaler, params, opt));  // and the next clean step runs again
    EXPECT_FALSE(scaler.last_step_skipped());
    EXPECT_EQ(sgd.steps, 2);
  }
}

TEST(GradScaler, GrowsAfterIntervalCleanStepsAndSkipsResetTheCount) {
  GradScaler scaler(with_interval(3));
  std::vector<at::Tensor> params = {param({1, 2})};
  auto opt = [] {};
  EXPECT_TRUE(scaled_step(scaler, params, opt));
  EXPECT_TRUE(scaled_step(scaler, params, opt));
  EXPECT_EQ(scaler.get_scale(), 65536.0);
  EXPECT_EQ(scaler.growth_tracker(), 2);
  EXPECT_TRUE(scaled_step(scaler, params, opt));
  EXPECT_EQ(scaler.get_scale(), 131072.0);  // third clean step in a row: x2
  EXPECT_EQ(scaler.growth_tracker(), 0);
  EXPECT_TRUE(scaled_step(scaler, params, opt));
  EXPECT_TRUE(scaled_step(scaler, params, opt));
  EXPECT_FALSE(scaled_step(scaler, params, opt, kInf));  // resets the count: x0.5
  EXPECT_EQ(scaler.get_scale(), 65536.0);
  EXPECT_TRUE(scaled_step(scaler, params, opt));
  EXPECT_TRUE(scaled_step(scaler, params, opt));
  EXPECT_EQ(scaler.get_scale(), 65536.0);
  EXPECT_TRUE(scaled_step(scaler, params, opt));
  EXPECT_EQ(scaler.get_scale(), 131072.0);
}

TEST(GradScaler, UnscaleIsIdempotentWithinAStep) {
  GradScaler scaler;
  std::vector<at::Tensor> params = {param({1, 2, 3})};
  const at::Tensor truth = at::tensor({0.5f, -0.25f, 0.125f});
  for (int step = 0; step < 2; ++step) {  // the second step shows update() re-arms unscale_
    set_grad(params[0], truth * scaler.get_scale());
    scaler.unscale_(params);
    EXPECT_TRUE(params[0].grad().equal(truth));
    scaler.unscale_(params);
    EXPECT_TRUE(params[0].grad().equal(truth)) << "a second unscale_ divided again";
    at::Tensor seen;
    EXPECT_TRUE(scaler.step(params, [&] { seen = params[0].grad().clone(); }));
    EXPECT_TRUE(seen.equal(truth)) << "step() unscaled again after unscale_";
    scaler.update();
  }
}

// A step that stopped part-way (a CUDA graph capture that failed in the optimizer) is forgotten: the next step
// unscales and steps as if it had not been, with the same scale.
TEST(GradScaler, AnAbandonedStepLeavesTheNextOneAsIfItHadNotBeen) {
  GradScaler scaler;
  std::vector<at::Tensor> params = {param({1, 2, 3})};
  const at::Tensor truth = at::tensor({0.5f, -0.25f, 0.125f});
  set_grad(params[0], truth * scaler.get_scale());
  EXPECT_THROW(scaler.step_on_device(params, {}, [](const at::Tensor&) { throw std::runtime_error("capture refused an op"); }),
               std::runtime_error);
  scaler.abandon_step();
  EXPECT_EQ(scaler.get_scale(), 65536.0);
  set_grad(params[0], truth * scaler.get_scale());
  at::Tensor seen;
  const at::Tensor found = scaler.step_on_device(params, {}, [&](const at::Tensor&) { seen = params[0].grad().clone(); });
  EXPECT_TRUE(seen.equal(truth)) << "the gradients were not unscaled: the abandoned step's unscale_ was remembered";
  EXPECT_EQ(found.item<float>(), 0.0f);
  scaler.update();
  EXPECT_EQ(scaler.skipped_steps(), 0);
}

TEST(GradScaler, ClippingAfterUnscaleSeesTrueGradientNorms) {
  GradScaler scaler;
  std::vector<at::Tensor> params = {param({0, 0}), param({0})};
  const std::vector<at::Tensor> truth = {at::tensor({3.0f, 0.0f}), at::tensor({4.0f})};  // global norm 5
  for (std::size_t i = 0; i < params.size(); ++i) set_grad(params[i], truth[i] * scaler.get_scale());

  scaler.unscale_(params);
  double sq = 0;
  for (const auto& p : params) sq += p.grad().pow(2).sum().item<double>();
  const double norm = std::sqrt(sq);
  EXPECT_DOUBLE_EQ(norm, 5.0);
  const double max_norm = 1.0;
  for (const auto& p : params) p.grad().mul_(max_norm / norm);  // clip_grad_norm_

  const double lr = 0.5;
  EXPECT_TRUE(scaler.step(params, [&] {
    at::NoGradGuard no_grad;
    for (const auto& p : params) p.sub_(p.grad() * lr);
  }));
  scaler.update();
  EXPECT_TRUE(params[0].detach().allclose(at::tensor({-0.3f, 0.0f})));
  EXPECT_TRUE(params[1].detach().allclose(at::tensor({-0.4f})));
}

TEST(GradScaler, ParametersWithoutGradientAreIgnored) {
  GradScaler scaler(with_interval(1));
  at::Tensor frozen = param({7, 8});
  at::Tensor live = param({1});
  set_grad(live, at::tensor({65536.0f}));
  int calls = 0;
  EXPECT_TRUE(scaler.step({frozen, live, at::Tensor()}, [&] { ++calls; }));
  scaler.update();
  EXPECT_EQ(calls, 1);
  EXPECT_FALSE(frozen.grad().defined());
  EXPECT_EQ(live.grad().item<float>(), 1.0f);
  EXPECT_EQ(scaler.get_scale(), 131072.0);
  // No gradient at all: a clean step that changes nothing.
  EXPECT_TRUE(scaler.step({frozen}, [&] { ++calls; }));
  scaler.update();
  EXPECT_EQ(calls, 2);
  EXPECT_EQ(scaler.get_scale(), 262144.0);
}

TEST(GradScaler, GradientsOfSeveralDtypesAreUnscaledTogether) {
  GradScaler scaler;
  std::vector<at::Tensor> params = {param({1}), at::zeros({2}, at::kBFloat16).requires_grad_(true),
                                    at::zeros({1}, at::kDouble).requires_grad_(true), param({1})};
  set_grad(params[0], at::tensor({2.0f * 65536}));
  set_grad(params[1], at::full({2}, 4.0 * 65536, at::kBFloat16));
  set_grad(params[2], at::full({1}, 8.0 * 65536, at::kDouble));
  set_grad(params[3], at::tensor({kInf}));
  EXPECT_FALSE(scaler.step(params, [] {}));  // the inf in the last fp32 tensor counts for all groups
  EXPECT_EQ(params[0].grad().item<float>(), 2.0f);
  EXPECT_TRUE(params[1].grad().equal(at::full({2}, 4.0, at::kBFloat16)));
  EXPECT_EQ(params[2].grad().item<double>(), 8.0);
}

TEST(GradScaler, RefusesFp16GradientsWhenScaling) {
  GradScaler scaler;
  at::Tensor p = at::zeros({2}, at::kHalf).requires_grad_(true);
  set_grad(p, at::ones({2}, at::kHalf));
  try {
    scaler.unscale_({p});
    FAIL() << "fp16 gradients were unscaled";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kConfig);
  }
}

TEST(GradScaler, StepTwiceWithoutUpdateIsAnError) {
  GradScaler scaler;
  std::vector<at::Tensor> params = {param({1})};
  set_grad(params[0], at::ones({1}));
  EXPECT_TRUE(scaler.step(params, [] {}));
  EXPECT_THROW(scaler.step(params, [] {}), Error);
  scaler.update();
  EXPECT_NO_THROW(scaler.step(params, [] {}));
}

TEST(GradScaler, DisabledOnlyChecksForNonFiniteGradients) {
  GradScalerOptions o;
  o.enabled = false;
  GradScaler scaler(o);
  const at::Tensor loss = at::scalar_tensor(2.5f);
  EXPECT_TRUE(scaler.scale(loss).is_same(loss));
  EXPECT_EQ(scaler.get_scale(), 1.0);
  std::vector<at::Tensor> params = {param({1, 2})};
  set_grad(params[0], at::tensor({3.0f, 4.0f}));
  scaler.unscale_(params);
  EXPECT_TRUE(params[0].grad().equal(at::tensor({3.0f, 4.0f})));
  EXPECT_TRUE(scaler.step(params, [] {}));
  scaler.update();
  set_grad(params[0], at::tensor({3.0f, kNaN}));
  int calls = 0;
  EXPECT_FALSE(scaler.step(params, [&] { ++calls; }));
  scaler.update();
  EXPECT_EQ(calls, 0);
  EXPECT_EQ(scaler.skipped_steps(), 1);
  EXPECT_EQ(scaler.get_scale(), 1.0);
  // Disabled scalers save only the skip count; fp16 parameters are fine without scaling.
  EXPECT_EQ(scaler.state_dict().size(), 1u);
  at::Tensor half = at::zeros({1}, at::kHalf).requires_grad_(true);
  set_grad(half, at::ones({1}, at::kHalf));
  EXPECT_NO_THROW(scaler.unscale_({half}));
}

TEST(GradScaler, InvalidOptionsAreConfigErrors) {
  auto expect_config_error = [](GradScalerOptions o) {
    try {
      GradScaler scaler(o);
      ADD_FAILURE() << "accepted invalid options";
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::kConfig);
    }
  };
  GradScalerOptions o;
  o.init_scale = 0;
  expect_config_error(o);
  o = {};
  o.growth_factor = 0.5;
  expect_config_error(o);
  o = {};
  o.backoff_factor = 1.5;
  expect_config_error(o);
  o = {};
  o.growth_interval = 0;
  expect_config_error(o);
}

TEST(GradScaler, StateDictRoundTripContinuesIdentically) {
  GradScalerOptions o;
  o.init_scale = 1024;
  o.growth_factor = 4;
  o.backoff_factor = 0.25;
  o.growth_interval = 3;
  GradScaler a(o);
  std::vector<at::Tensor> pa = {param({1, 2})};
  auto noop = [] {};
  scaled_step(a, pa, noop);
  scaled_step(a, pa, noop);
  scaled_step(a, pa, noop);        // grows to 4096
  scaled_step(a, pa, noop, kInf);  // backs off to 1024
  scaled_step(a, pa, noop);        // tracker 1
  const StateDict state = a.state_dict();
  for (const auto& [key, t] : state) {
    EXPECT_EQ(t.dim(), 0) << key;
    EXPECT_TRUE(t.device().is_cpu()) << key;
  }
  EXPECT_EQ(get_double(state, "scale"), 1024.0);
  EXPECT_EQ(get_int(state, "growth_tracker"), 1);
  EXPECT_EQ(get_int(state, "skipped_steps"), 1);

  GradScaler b;  // different options: the state brings its own
  b.load_state_dict(state);
  EXPECT_EQ(b.get_scale(), 1024.0);
  EXPECT_EQ(b.growth_tracker(), 1);
  EXPECT_EQ(b.skipped_steps(), 1);
  EXPECT_EQ(b.options().growth_factor, 4.0);
  EXPECT_EQ(b.options().backoff_factor, 0.25);
  EXPECT_EQ(b.options().growth_interval, 3);
  std::vector<at::Tensor> pb = {param({1, 2})};
  for (const std::optional<float> inject :
       {std::optional<float>{}, std::optional<float>{}, std::optional<float>{kNaN}, std::optional<float>{}}) {
    EXPECT_EQ(scaled_step(a, pa, noop, inject), scaled_step(b, pb, noop, inject));
    EXPECT_EQ(a.get_scale(), b.get_scale());
    EXPECT_EQ(a.growth_tracker(), b.growth_tracker());
  }
  EXPECT_EQ(b.get_scale(), 1024.0);  // grew to 4096 on the 2nd step (interval 3 counted from 1), then x0.25
}

TEST(GradScaler, LoadRejectsIncompleteOrCorruptState) {
  GradScaler scaler;
  StateDict empty;
  EXPECT_THROW(scaler.load_state_dict(empty), Error);
  GradScalerOptions off;
  off.enabled = false;
  try {
    scaler.load_state_dict(GradScaler(off).state_dict());
    FAIL() << "a disabled scaler's state was loaded into an enabled one";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kData);
    EXPECT_NE(e.message().find("'scale'"), std::string::npos) << e.message();
  }
  StateDict bad = GradScaler().state_dict();
  put_double(bad, "scale", -1.0);
  EXPECT_THROW(scaler.load_state_dict(bad), Error);
  EXPECT_EQ(scaler.get_scale(), 65536.0);  // a rejected state changes nothing
}

TEST(GradScaler, StateMovesToTheGradientsDeviceOnFirstUse) {
  if (!at::hasCUDA()) GTEST_SKIP() << "needs a CUDA device";
  const at::Device cuda("cuda:0");
  GradScaler saved_on_cuda(with_interval(1));
  at::Tensor pc = at::zeros({2}, at::TensorOptions().device(cuda)).requires_grad_(true);
  pc.mutable_grad() = at::full({2}, 65536.0, at::TensorOptions().device(cuda));
  EXPECT_TRUE(saved_on_cuda.step({pc}, [] {}));
  saved_on_cuda.update();
  EXPECT_EQ(saved_on_cuda.get_scale(), 131072.0);
  EXPECT_TRUE(pc.grad().cpu().equal(at::ones({2})));

  GradScaler on_cpu(with_interval(1));  // a CUDA checkpoint, resumed on the CPU
  on_cpu.load_state_dict(saved_on_cuda.state_dict());
  std::vector<at::Tensor> params = {param({0, 0})};
  set_grad(params[0], at::full({2}, 131072.0));
  EXPECT_TRUE(on_cpu.step(params, [] {}));
  on_cpu.update();
  EXPECT_TRUE(params[0].grad().equal(at::ones({2})));
  EXPECT_EQ(on_cpu.get_scale(), 262144.0);

  GradScaler on_cuda(with_interval(1));  // and a CPU checkpoint resumed on CUDA
  on_cuda.load_state_dict(on_cpu.state_dict());
  pc.mutable_grad() = at::full({2}, 262144.0, at::TensorOptions().device(cuda));
  pc.mutable_grad()[0] = std::numeric_limits<float>::infinity();
  EXPECT_FALSE(on_cuda.step({pc}, [] {}));
  on_cuda.update();
  EXPECT_EQ(on_cuda.get_scale(), 131072.0);
}

}  // namespace
}  // namespace bellows::precision
