// The optimizer registry: a new optimizer is one file and one registration line. A toy registered from this file
// (Signum: the sign of a momentum, Lion's core; foreach ops only) is listed after the built-in ones, trains through
// Optimizer, keeps, saves and reloads its state by its own kind's name; the built-in entries answer what the plan
// asks (state tensors per parameter) and the unknown-name error is the one the config has always given.
#include "bellows/train/optimizer_registry.h"

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <fmt/format.h>
#include <gtest/gtest.h>

#include "bellows/util/check.h"
#include "bellows/util/error.h"

namespace bellows::train {
namespace {

// m = beta1 * m + (1 - beta1) * g;  p -= lr * sign(m). No weight decay.
class ToySignumRule final : public UpdateRule {
 public:
  explicit ToySignumRule(double beta) : beta_(beta) {}
  std::vector<std::string> state_kinds() const override { return {"toy_momentum"}; }
  void update(GroupStep& s) const override {
    for (std::size_t i : s.active()) {
      if (s.started(i)) continue;
      s.state(0)[i] = at::zeros_like(s.group().params[i]);
      s.start(i);
    }
    s.count_updates();
    for (const auto& idx : device_dtype_buckets(s.group().params, s.active())) {
      const auto m = pick(s.state(0), idx);
      at::_foreach_lerp_(m, pick(s.grads(), idx), 1 - beta_);
      at::_foreach_add_(pick(s.group().params, idx), at::_foreach_sign(m), -s.lr());
    }
  }

 private:
  double beta_;
};

OptimizerEntry toy_signum_entry() {
  OptimizerEntry e;
  e.name = "toy_signum";
  e.help = "the sign of a momentum (a test's toy)";
  e.order = 3;
  e.state_kinds = {"toy_momentum"};
  e.fused_kernels = false;
  e.validate = [](const OptimizerOptions& o) {
    BELLOWS_CHECK_CONFIG(o.beta1 >= 0 && o.beta1 < 1, fmt::format("optim.beta1 is {}, expected in [0, 1)", o.beta1),
                         kOptimizerOptionsHint);
  };
  e.make = [](const OptimizerOptions& o) { return std::make_shared<const ToySignumRule>(o.beta1); };
  return e;
}
const OptimizerRegistrar kToySignumOptimizerRegistered(toy_signum_entry());

NamedParameters toy_signum_params() {
  auto gen = at::make_generator<at::CPUGeneratorImpl>(42);
  return {{"fc.weight", at::randn({4, 3}, gen).requires_grad_(true)}, {"fc.bias", at::randn({4}, gen).requires_grad_(true)}};
}

void set_toy_signum_grads(const NamedParameters& params, int step) {
  auto gen = at::make_generator<at::CPUGeneratorImpl>(7 + step);
  for (const auto& [name, p] : params) at::Tensor(p).mutable_grad() = at::randn(p.sizes(), gen);
}

OptimizerOptions toy_signum_options() {
  OptimizerOptions o;
  o.type = "toy_signum";
  o.lr = 0.01;
  o.beta1 = 0.8;
  return o;
}

void run_toy_signum(Optimizer& opt, const NamedParameters& params, int from, int to) {
  for (int s = from; s <= to; ++s) {
    set_toy_signum_grads(params, s);
    opt.step();
  }
}

TEST(OptimizerRegistry, ListsTheRegisteredInTheirOrder) {
  EXPECT_EQ(optimizer_names(), (std::vector<std::string>{"adamw", "adam", "sgd", "toy_signum"}));
  EXPECT_EQ(find_optimizer("toy_signum").help, "the sign of a momentum (a test's toy)");
}

TEST(OptimizerRegistry, UnknownNameSuggestsTheClosest) {
  try {
    find_optimizer("adamww");
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kConfig);
    EXPECT_EQ(e.message(), "optim.type is 'adamww', an unknown optimizer");
    EXPECT_EQ(e.hint(), "did you mean 'adamw'? (valid: adamw, adam, sgd, toy_signum)");
  }
}

TEST(OptimizerRegistry, StateTensorsPerParameter) {
  OptimizerOptions o;
  EXPECT_EQ(optimizer_state_tensors(o), 2);  // adamw
  o.type = "adam";
  EXPECT_EQ(optimizer_state_tensors(o), 2);
  o.type = "sgd";
  EXPECT_EQ(optimizer_state_tensors(o), 0);
  o.momentum = 0.9;
  EXPECT_EQ(optimizer_state_tensors(o), 1);
  EXPECT_EQ(optimizer_state_tensors(toy_signum_options()), 1);
}

// Three steps against the formula written out; the state dict holds the toy's kind under its name.
TEST(OptimizerRegistry, ToyTrainsThroughOptimizer) {
  const auto params = toy_signum_params();
  std::vector<at::Tensor> expected, momentum;
  for (const auto& [name, p] : params) {
    expected.push_back(p.detach().clone());
    momentum.push_back(at::zeros_like(p));
  }
  Optimizer opt(params, toy_signum_options());
  EXPECT_FALSE(opt.fused()) << "auto takes foreach for an optimizer without fused kernels";
  for (int s = 1; s <= 3; ++s) {
    set_toy_signum_grads(params, s);
    for (std::size_t i = 0; i < params.size(); ++i) {
      momentum[i] = 0.8 * momentum[i] + 0.2 * params[i].second.grad();
      expected[i] = expected[i] - 0.01 * momentum[i].sign();
    }
    opt.step();
  }
  for (std::size_t i = 0; i < params.size(); ++i) {
    EXPECT_TRUE(at::allclose(params[i].second, expected[i], 1e-6, 1e-7)) << params[i].first;
  }
  const StateDict sd = opt.state_dict();
  EXPECT_EQ(sd.at("step.fc.weight").item<double>(), 3.0);
  EXPECT_TRUE(sd.at("toy_momentum.fc.bias").allclose(momentum[1], 1e-6, 1e-7));
  EXPECT_EQ(sd.size(), 2u + 2u * 2u);  // lr, steps; step and toy_momentum per parameter
  EXPECT_GT(opt.state_bytes(), 0);
}

TEST(OptimizerRegistry, ToyStateDictRoundTripContinuesBitwise) {
  const auto params = toy_signum_params();
  Optimizer original(params, toy_signum_options());
  run_toy_signum(original, params, 1, 2);
  StateDict saved;
  for (const auto& [k, v] : original.state_dict()) saved[k] = v.detach().clone();
  NamedParameters resumed_params;
  for (const auto& [n, p] : params) resumed_params.emplace_back(n, p.detach().clone().requires_grad_(true));
  run_toy_signum(original, params, 3, 4);

  Optimizer resumed(resumed_params, toy_signum_options());
  resumed.load_state_dict(saved);
  EXPECT_EQ(resumed.steps(), 2);
  run_toy_signum(resumed, resumed_params, 3, 4);
  for (std::size_t i = 0; i < params.size(); ++i) {
    EXPECT_TRUE(params[i].second.equal(resumed_params[i].second)) << params[i].first;
  }
  StateDict missing = saved;
  missing.erase("toy_momentum.fc.weight");
  Optimizer fresh(resumed_params, toy_signum_options());
  EXPECT_THROW(fresh.load_state_dict(missing), Error);
}

// Without fused kernels the optimizer reads found_inf on the host: a flagged step leaves everything as it was.
TEST(OptimizerRegistry, ToySkipsAFlaggedStep) {
  const auto params = toy_signum_params();
  Optimizer opt(params, toy_signum_options());
  run_toy_signum(opt, params, 1, 1);
  const at::Tensor before = params[0].second.detach().clone();
  set_toy_signum_grads(params, 2);
  opt.step(at::ones({}, at::kFloat));
  EXPECT_TRUE(params[0].second.equal(before));
  EXPECT_EQ(opt.steps(), 2);
  EXPECT_EQ(opt.state_dict().at("step.fc.weight").item<double>(), 1.0);
}

TEST(OptimizerRegistry, FusedWithoutFusedKernelsIsAConfigError) {
  OptimizerOptions o = toy_signum_options();
  o.implementation = "fused";
  try {
    Optimizer opt(toy_signum_params(), o);
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kConfig);
    EXPECT_EQ(e.message(), "optim.implementation is 'fused' but optimizer 'toy_signum' has no fused kernels");
  }
  o = toy_signum_options();
  o.beta1 = 1.5;
  EXPECT_THROW({ Optimizer bad(toy_signum_params(), o); }, Error) << "the entry's own check";
}

// Every registered optimizer's state kinds are known to each: an SGD without momentum loads the steps of an AdamW's
// state dict and ignores its moments, as it always has.
TEST(OptimizerRegistry, OtherOptimizersKindsAreIgnoredOnLoad) {
  const auto params = toy_signum_params();
  Optimizer adamw(params, OptimizerOptions{});
  run_toy_signum(adamw, params, 1, 1);
  OptimizerOptions sgd;
  sgd.type = "sgd";
  Optimizer plain(params, sgd);
  plain.load_state_dict(adamw.state_dict());
  EXPECT_EQ(plain.state_dict().at("step.fc.weight").item<double>(), 1.0);
  EXPECT_EQ(plain.state_dict().count("exp_avg.fc.weight"), 0u);
}

}  // namespace
}  // namespace bellows::train
