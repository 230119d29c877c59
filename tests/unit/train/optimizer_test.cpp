// Optimizers against reference updates written here in float64 (the textbook AdamW/Adam/SGD formulas, with
// PyTorch's conventions for momentum and Nesterov), fused vs foreach agreement, parameter groups, skipped
// parameters, and the state dict (bitwise-identical continuation after save and load). OptimizerGolden
// replays tests/golden/optim_reference.json, recorded from PyTorch's torch.optim (gen_optim_reference.py).
#include "bellows/train/optimizer.h"

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <ATen/Context.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <set>

#include "bellows/util/error.h"
#include "test_paths.h"

namespace bellows::train {
namespace {

// A Linear + LayerNorm + head set of named tensors; the 2-D weights decay, the rest do not.
NamedParameters make_params(at::ScalarType dtype = at::kFloat, c10::Device device = c10::kCPU) {
  auto gen = at::make_generator<at::CPUGeneratorImpl>(1234);
  auto make = [&](std::vector<int64_t> shape) {
    return at::randn(shape, gen, at::TensorOptions().dtype(at::kDouble)).to(device, dtype).requires_grad_(true);
  };
  return {{"fc.weight", make({5, 3})},
          {"fc.bias", make({5})},
          {"norm.weight", make({5})},
          {"norm.bias", make({5})},
          {"head.weight", make({2, 5})}};
}
const std::set<std::string> kDecayed = {"fc.weight", "head.weight"};

// Deterministic gradients per (step, parameter index), generated in float64 on the CPU.
at::Tensor grad_for(int step, std::size_t index, at::IntArrayRef shape) {
  auto gen = at::make_generator<at::CPUGeneratorImpl>(100 * step + static_cast<int>(index));
  return at::randn(shape, gen, at::TensorOptions().dtype(at::kDouble));
}

void set_grads(const NamedParameters& params, int step, const std::set<std::string>& skip = {}) {
  for (std::size_t i = 0; i < params.size(); ++i) {
    at::Tensor p = params[i].second;
    if (skip.count(params[i].first)) {
      p.mutable_grad().reset();
    } else {
      p.mutable_grad() = grad_for(step, i, p.sizes()).to(p.device(), p.scalar_type());
    }
  }
}

NamedParameters clone_params(const NamedParameters& params) {
  NamedParameters out;
  for (const auto& [n, p] : params) out.emplace_back(n, p.detach().clone().requires_grad_(true));
  return out;
}

double lr_at(int step) {
  return 0.05 * (1.0 - 0.1 * step);
}  // the rate changes between steps

struct Reference {
  std::string type;  // adamw | adam | sgd
  double beta1 = 0.9, beta2 = 0.999, eps = 1e-8, wd = 0.1;
  double momentum = 0, dampening = 0;
  bool nesterov = false;
};

// Runs `steps` steps of the textbook update in float64, parameter by parameter, with independent step counts
// (a parameter listed in skip_at[step] has no gradient that step).
std::map<std::string, at::Tensor> reference_run(const NamedParameters& initial, const Reference& r, int steps,
                                                const std::map<int, std::set<std::string>>& skip_at = {}) {
  std::map<std::string, at::Tensor> out;
  for (std::size_t i = 0; i < initial.size(); ++i) {
    const auto& [name, p0] = initial[i];
    at::Tensor p = p0.detach().to(c10::kCPU, at::kDouble).clone();
    at::Tensor m = at::zeros_like(p), v = at::zeros_like(p), buf;
    const double wd = kDecayed.count(name) ? r.wd : 0.0;
    int t = 0;
    for (int s = 1; s <= steps; ++s) {
      auto it = skip_at.find(s);
      if (it != skip_at.end() && it->second.count(name)) continue;
      ++t;
      const double lr = lr_at(s);
      at::Tensor g = grad_for(s, i, p.sizes());
      if (r.type == "sgd") {
        g = g + wd * p;
        if (r.momentum != 0) {
          buf = t == 1 ? g.clone() : r.momentum * buf + (1 - r.dampening) * g;
          g = r.nesterov ? g + r.momentum * buf : buf;
        }
        p = p - lr * g;
        continue;
      }
      if (r.type == "adamw") {
        p = p * (1 - lr * wd);
      } else {
        g = g + wd * p;
      }
      m = r.beta1 * m + (1 - r.beta1) * g;
      v = r.beta2 * v + (1 - r.beta2) * g * g;
      const at::Tensor m_hat = m / (1 - std::pow(r.beta1, t));
      const at::Tensor v_hat = v / (1 - std::pow(r.beta2, t));
      p = p - lr * m_hat / (v_hat.sqrt() + r.eps);
    }
    out[name] = p;
  }
  return out;
}

OptimizerOptions options_for(const Reference& r, const std::string& implementation) {
  OptimizerOptions o;
  o.type = r.type;
  o.beta1 = r.beta1;
  o.beta2 = r.beta2;
  o.eps = r.eps;
  o.weight_decay = r.wd;
  o.momentum = r.momentum;
  o.dampening = r.dampening;
  o.nesterov = r.nesterov;
  o.implementation = implementation;
  return o;
}

void run(Optimizer& opt, const NamedParameters& params, int from, int to,
         const std::map<int, std::set<std::string>>& skip_at = {}) {
  for (int s = from; s <= to; ++s) {
    auto it = skip_at.find(s);
    set_grads(params, s, it == skip_at.end() ? std::set<std::string>{} : it->second);
    opt.set_lr(lr_at(s));
    opt.step();
  }
}

// Largest |actual - expected| / max(|expected|, 1): relative for weights of order one and above.
double max_rel_error(const at::Tensor& actual, const at::Tensor& expected) {
  const at::Tensor a = actual.detach().to(c10::kCPU, at::kDouble);
  return ((a - expected).abs() / expected.abs().clamp_min(1.0)).max().item<double>();
}

void expect_matches_reference(const Reference& r, const std::string& implementation, bool expect_fused,
                              const std::map<int, std::set<std::string>>& skip_at = {},
                              c10::Device device = c10::kCPU) {
  const auto params = make_params(at::kFloat, device);
  const auto initial = reference_run(params, r, 0);
  const auto expected = reference_run(params, r, 5, skip_at);
  Optimizer opt(params, options_for(r, implementation));
  EXPECT_EQ(opt.fused(), expect_fused);
  run(opt, params, 1, 5, skip_at);
  for (const auto& [name, p] : params) {
    // The reference must have moved the weights, or agreeing with it would prove nothing.
    EXPECT_GT(max_rel_error(p, initial.at(name)), 1e-3) << name;
    EXPECT_LT(max_rel_error(p, expected.at(name)), 1e-6) << r.type << " " << implementation << " " << name;
  }
}

TEST(Optimizer, FusedAdamWMatchesReference) {
  expect_matches_reference({"adamw"}, "fused", true);
}
TEST(Optimizer, FusedAdamL2MatchesReference) {
  expect_matches_reference({"adam"}, "fused", true);
}
TEST(Optimizer, FusedSgdMomentumMatchesReference) {
  expect_matches_reference({.type = "sgd", .momentum = 0.9, .dampening = 0.1}, "fused", true);
}
TEST(Optimizer, FusedSgdNesterovMatchesReference) {
  expect_matches_reference({.type = "sgd", .momentum = 0.9, .nesterov = true}, "fused", true);
}
TEST(Optimizer, FusedSgdPlainMatchesReference) {
  expect_matches_reference({.type = "sgd"}, "fused", true);
}
TEST(Optimizer, AutoPicksFusedOnCpuFloat) {
  expect_matches_reference({"adamw"}, "auto", true);
}

TEST(Optimizer, ForeachMatchesReference) {
  expect_matches_reference({"adamw"}, "foreach", false);
  expect_matches_reference({"adam"}, "foreach", false);
  expect_matches_reference({.type = "sgd", .momentum = 0.9, .dampening = 0.1}, "foreach", false);
  expect_matches_reference({.type = "sgd", .momentum = 0.9, .nesterov = true}, "foreach", false);
}

TEST(Optimizer, FusedAndForeachAgree) {
  const std::vector<Reference> configs = {{"adamw"},
                                          {"adam"},
                                          {.type = "sgd", .momentum = 0.9, .dampening = 0.1},
                                          {.type = "sgd", .momentum = 0.9, .nesterov = true}};
  for (const auto& r : configs) {
    const auto a = make_params(), b = clone_params(a);
    Optimizer fused(a, options_for(r, "fused")), foreach (b, options_for(r, "foreach"));
    run(fused, a, 1, 5);
    run(foreach, b, 1, 5);
    for (std::size_t i = 0; i < a.size(); ++i) {
      EXPECT_LT(max_rel_error(a[i].second, b[i].second.detach().to(at::kDouble)), 1e-6) << r.type << " " << a[i].first;
    }
  }
}

// A parameter without a gradient in a step is skipped: no update, no step count; when it first gets one,
// its state starts then (for SGD, in the same fused call as parameters that already have momentum).
TEST(Optimizer, ParametersWithoutGradientAreSkipped) {
  const std::map<int, std::set<std::string>> skip = {{1, {"fc.bias", "head.weight"}}, {3, {"fc.weight"}}};
  for (const std::string impl : {"fused", "foreach"}) {
    expect_matches_reference({"adamw"}, impl, impl == "fused", skip);
    expect_matches_reference({.type = "sgd", .momentum = 0.9, .dampening = 0.1}, impl, impl == "fused", skip);
  }
  const auto params = make_params();
  Optimizer opt(params, options_for({"adamw"}, "fused"));
  set_grads(params, 1, {"head.weight"});
  const at::Tensor head_before = params[4].second.detach().clone();
  opt.step();
  EXPECT_TRUE(params[4].second.equal(head_before));
  const StateDict sd = opt.state_dict();
  EXPECT_EQ(sd.at("step.fc.weight").item<double>(), 1.0);
  EXPECT_EQ(sd.at("step.head.weight").item<double>(), 0.0);
  EXPECT_EQ(sd.count("exp_avg.head.weight"), 0u) << "no state before a first update";
}

// found_inf = 1 skips the update: parameters, moments, buffers and per-parameter step counts stay bitwise as
// they were, for every implementation (fused on the device, foreach after reading the flag); found_inf = 0
// gives exactly the update without a flag. A skipped first SGD momentum update leaves no half-initialised buffer:
// the next real step starts the buffer at the gradient, read on the host with dampening, and on the fused path
// without dampening from a zero buffer (no host read; the same update bitwise).
TEST(Optimizer, FoundInfSkipsTheUpdateExactly) {
  const std::vector<Reference> configs = {{"adamw"}, {"adam"}, {.type = "sgd", .momentum = 0.9, .dampening = 0.1},
                                          {.type = "sgd", .momentum = 0.9}, {.type = "sgd"}};
  const at::Tensor one = at::ones({}, at::kFloat), zero = at::zeros({}, at::kFloat);
  for (const std::string impl : {"fused", "foreach"}) {
    for (const auto& r : configs) {
      const auto a = make_params(), b = clone_params(a);
      Optimizer flagged(a, options_for(r, impl)), plain(b, options_for(r, impl));
      SCOPED_TRACE(r.type + " " + impl);
      set_grads(a, 1);
      flagged.step(one);  // skipped before any state exists
      set_grads(a, 1);
      flagged.step(zero);
      set_grads(b, 1);
      plain.step();
      for (int step = 2; step <= 3; ++step) {
        set_grads(a, step);
        flagged.step(zero);
        set_grads(b, step);
        plain.step();
      }
      const StateDict before = flagged.state_dict();
      std::vector<at::Tensor> held;
      for (const auto& [n, p] : a) held.push_back(p.detach().clone());
      std::map<std::string, at::Tensor> held_state;
      for (const auto& [k, v] : before) held_state[k] = v.clone();
      set_grads(a, 9);
      flagged.step(one);
      for (std::size_t i = 0; i < a.size(); ++i) {
        EXPECT_TRUE(a[i].second.equal(held[i])) << a[i].first << " changed on a skipped update";
        EXPECT_TRUE(a[i].second.equal(b[i].second)) << a[i].first << ": the flagged run drifted from the plain one";
      }
      for (const auto& [k, v] : flagged.state_dict()) {
        if (k == "steps") EXPECT_EQ(v.item<double>(), 5.0) << "calls, skipped ones included";
        else EXPECT_TRUE(v.equal(held_state.at(k))) << k << " changed on a skipped update";
      }
    }
  }
}

// A CUDA graph capture that failed created state whose kernels never ran; drop_state_since(state_mark()) takes
// exactly that state away: the parameter updates again as a first update, the others keep theirs.
TEST(Optimizer, DropStateSinceAMarkForgetsOnlyTheNewState) {
  for (const Reference r : {Reference{"adamw"}, Reference{.type = "sgd", .momentum = 0.9}}) {
    SCOPED_TRACE(r.type);
    const auto a = make_params(), b = clone_params(a);
    Optimizer opt(a, options_for(r, "fused"));
    set_grads(a, 1, {"head.weight"});
    opt.step();
    const Optimizer::StateMark mark = opt.state_mark();
    set_grads(a, 2);  // head.weight's first gradient: its state starts here
    opt.step();
    EXPECT_GT(opt.state_dict().at("step.head.weight").item<double>(), 0.0);
    opt.drop_state_since(mark);
    const StateDict sd = opt.state_dict();
    EXPECT_EQ(sd.at("step.head.weight").item<double>(), 0.0) << "the new state is gone";
    EXPECT_EQ(sd.count("exp_avg.head.weight") + sd.count("momentum_buffer.head.weight"), 0u);
    EXPECT_EQ(sd.at("step.fc.weight").item<double>(), 2.0) << "state from before the mark stays";
    Optimizer other(b, options_for({"adam"}, "fused"));
    EXPECT_THROW(other.drop_state_since(Optimizer::StateMark{}), Error);
  }
}

TEST(Optimizer, ZeroGradLeavesGradientsUndefined) {
  const auto params = make_params();
  Optimizer opt(params, {});
  set_grads(params, 1);
  opt.zero_grad();
  for (const auto& [n, p] : params) EXPECT_FALSE(p.grad().defined()) << n;
}

TEST(Optimizer, ParamGroupsAndFrozenParameters) {
  auto gen = at::make_generator<at::CPUGeneratorImpl>(7);
  auto make = [&](std::vector<int64_t> shape, bool trainable = true) {
    return at::randn(shape, gen).requires_grad_(trainable);
  };
  const NamedParameters params = {{"encoder.fc.weight", make({4, 3})},     {"encoder.fc.bias", make({4})},
                                  {"encoder.norm.weight", make({4})},      {"encoder.norm.bias", make({4})},
                                  {"encoder.norm2d.weight", make({2, 2})},  // 2-D, but a norm by its name
                                  {"head.weight", make({2, 4})},           {"head.scale", make({})},
                                  {"frozen.weight", make({3, 3}, false)}};
  OptimizerOptions o;
  o.weight_decay = 0.05;
  Optimizer opt(params, o);
  ASSERT_EQ(opt.groups().size(), 2u);
  EXPECT_EQ(opt.groups()[0].name, "decay");
  EXPECT_EQ(opt.groups()[0].names, (std::vector<std::string>{"encoder.fc.weight", "head.weight"}));
  EXPECT_DOUBLE_EQ(opt.groups()[0].weight_decay, 0.05);
  EXPECT_EQ(opt.groups()[1].name, "no_decay");
  EXPECT_EQ(opt.groups()[1].names,
            (std::vector<std::string>{"encoder.fc.bias", "encoder.norm.weight", "encoder.norm.bias",
                                      "encoder.norm2d.weight", "head.scale"}));
  EXPECT_DOUBLE_EQ(opt.groups()[1].weight_decay, 0.0);
  EXPECT_EQ(opt.parameters().size(), 7u);

  // Even with a gradient attached by hand, the frozen parameter is neither updated nor given state.
  at::Tensor frozen = params.back().second;
  const at::Tensor frozen_before = frozen.clone();
  for (const auto& [n, p] : params) at::Tensor(p).mutable_grad() = at::ones_like(p);
  opt.step();
  EXPECT_TRUE(frozen.equal(frozen_before));
  for (const auto& [key, value] : opt.state_dict()) EXPECT_EQ(key.find("frozen"), std::string::npos) << key;
  EXPECT_EQ(opt.state_dict().size(), 2u + 3u * 7u);  // lr, steps; step/exp_avg/exp_avg_sq per trainable
}

TEST(Optimizer, TiedWeightsAreUpdatedOnce) {
  const auto params = make_params();
  NamedParameters tied = params;
  tied.emplace_back("lm_head.weight", params[0].second);  // the same tensor under a second name
  const auto expected = reference_run(params, {"adamw"}, 1);
  Optimizer opt(tied, options_for({"adamw"}, "fused"));
  EXPECT_EQ(opt.parameters().size(), params.size());
  run(opt, params, 1, 1);
  EXPECT_LT(max_rel_error(params[0].second, expected.at("fc.weight")), 1e-6);
}

void expect_config_error(const NamedParameters& params, const OptimizerOptions& o, const std::string& needle) {
  try {
    Optimizer opt(params, o);
    ADD_FAILURE() << "no error for " << needle;
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kConfig) << e.what();
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
  }
}

TEST(Optimizer, ValidationErrorsNameTheOption) {
  const auto params = make_params();
  OptimizerOptions o;
  o.type = "adamww";
  expect_config_error(params, o, "'adamw'");  // suggested
  o = {};
  o.implementation = "fast";
  expect_config_error(params, o, "optim.implementation is 'fast'");
  o = {};
  o.lr = -1;
  expect_config_error(params, o, "optim.lr is -1");
  o = {};
  o.beta2 = 1.0;
  expect_config_error(params, o, "optim.beta2 is 1");
  o = {};
  o.type = "sgd";
  o.nesterov = true;
  expect_config_error(params, o, "optim.nesterov");
  o = {};
  auto frozen = make_params();
  for (auto& [n, p] : frozen) p.requires_grad_(false);
  expect_config_error(frozen, o, "no trainable parameter");
}

TEST(Optimizer, FusedWhereImpossibleIsAConfigError) {
  // A strided view is not dense: the fused kernels (which walk memory flat) cannot take it.
  NamedParameters params = make_params();
  params.emplace_back("strided.weight", at::randn({4, 8}).slice(1, 0, 8, 2).requires_grad_(true));
  OptimizerOptions o;
  o.implementation = "fused";
  expect_config_error(params, o, "'strided.weight'");
  o.implementation = "auto";
  Optimizer opt(params, o);
  EXPECT_FALSE(opt.fused()) << "auto falls back to foreach";
  for (auto& [n, p] : params) at::Tensor(p).mutable_grad() = at::ones_like(p);
  const at::Tensor before = params.back().second.detach().clone();
  opt.step();
  EXPECT_FALSE(params.back().second.equal(before));
}

// Saving after 3 steps and loading into a fresh optimizer over fresh copies of the weights continues exactly
// as the original does: bitwise.
TEST(Optimizer, StateDictRoundTripContinuesBitwise) {
  const std::vector<Reference> configs = {{"adamw"}, {"adam"}, {.type = "sgd", .momentum = 0.9, .nesterov = true}};
  const std::map<int, std::set<std::string>> skip = {{1, {"norm.bias"}}, {2, {"norm.bias"}}, {3, {"head.weight"}}};
  for (const auto& r : configs) {
    for (const std::string impl : {"fused", "foreach"}) {
      const auto params = make_params();
      Optimizer original(params, options_for(r, impl));
      run(original, params, 1, 2, skip);
      StateDict saved;  // as a checkpoint would: copies, on the CPU
      for (const auto& [k, v] : original.state_dict()) saved[k] = v.detach().to(c10::kCPU).clone();
      const auto resumed_params = clone_params(params);
      run(original, params, 3, 4, skip);

      Optimizer resumed(resumed_params, options_for(r, impl));
      resumed.load_state_dict(saved);
      EXPECT_EQ(resumed.steps(), 2);
      EXPECT_DOUBLE_EQ(resumed.lr(), lr_at(2));
      run(resumed, resumed_params, 3, 4, skip);
      for (std::size_t i = 0; i < params.size(); ++i) {
        EXPECT_TRUE(params[i].second.equal(resumed_params[i].second))
            << r.type << " " << impl << " " << params[i].first;
      }
    }
  }
}

TEST(Optimizer, StateLoadsAcrossImplementations) {
  const auto a = make_params(), b = clone_params(a);
  Optimizer fused(a, options_for({"adamw"}, "fused"));
  run(fused, a, 1, 2);
  Optimizer foreach (b, options_for({"adamw"}, "foreach"));
  for (std::size_t i = 0; i < a.size(); ++i) at::Tensor(b[i].second).detach().copy_(a[i].second.detach());
  foreach
    .load_state_dict(fused.state_dict());
  run(fused, a, 3, 4);
  run(foreach, b, 3, 4);
  for (std::size_t i = 0; i < a.size(); ++i) {
    EXPECT_LT(max_rel_error(b[i].second, a[i].second.detach().to(at::kDouble)), 1e-6) << a[i].first;
  }
}

TEST(Optimizer, LoadErrorsNameTheEntry) {
  const auto params = make_params();
  Optimizer opt(params, {});
  run(opt, params, 1, 1);
  const StateDict good = opt.state_dict();
  auto expect_data_error = [&](const StateDict& sd, const std::string& needle) {
    Optimizer fresh(clone_params(params), {});
    try {
      fresh.load_state_dict(sd);
      ADD_FAILURE() << "no error for " << needle;
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::kData) << e.what();
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    }
    EXPECT_EQ(fresh.steps(), 0) << "a failed load changes nothing";
  };
  StateDict missing = good;
  missing.erase("exp_avg_sq.fc.weight");
  expect_data_error(missing, "'exp_avg_sq.fc.weight'");
  StateDict no_step = good;
  no_step.erase("step.norm.bias");
  expect_data_error(no_step, "'step.norm.bias'");
  StateDict wrong_shape = good;
  wrong_shape["exp_avg.head.weight"] = at::zeros({5, 2});
  expect_data_error(wrong_shape, "'exp_avg.head.weight' has shape [5, 2]");
  StateDict extra = good;
  extra["exp_avg.encoder.gone"] = at::zeros({1});
  expect_data_error(extra, "'exp_avg.encoder.gone'");
}

TEST(Optimizer, LoadConvertsDtypeOntoParameter) {
  // State saved as float64 (another tool, or a different precision) lands in the parameter's dtype.
  const auto params = make_params();
  Optimizer opt(params, {});
  run(opt, params, 1, 1);
  StateDict sd;
  for (const auto& [k, v] : opt.state_dict()) sd[k] = v.to(at::kDouble);
  Optimizer fresh(clone_params(params), {});
  fresh.load_state_dict(sd);
  EXPECT_EQ(fresh.state_dict().at("exp_avg.fc.weight").scalar_type(), at::kFloat);
  EXPECT_EQ(fresh.state_dict().at("step.fc.weight").scalar_type(), at::kFloat);
}

// --- replay of PyTorch's own optimizers (tests/golden/optim_reference.json) ---

double hex_double(const nlohmann::json& j) {
  return std::strtod(j.get<std::string>().c_str(), nullptr);
}

at::Tensor hex_tensor(const nlohmann::json& values, const std::vector<std::int64_t>& shape) {
  std::vector<double> v;
  for (const auto& x : values) v.push_back(hex_double(x));
  return at::tensor(v, at::TensorOptions().dtype(at::kDouble)).reshape(shape);
}

TEST(OptimizerGolden, MatchesTorchOptimStepByStep) {
  const std::string path = std::string(BELLOWS_GOLDEN_DIR) + "/optim_reference.json";
  std::ifstream in(path);
  ASSERT_TRUE(in.good()) << "cannot read " << path;
  const auto doc = nlohmann::json::parse(in);
  ASSERT_EQ(doc.at("scenarios").size(), 5u);
  for (const auto& sc : doc.at("scenarios")) {
    for (const std::string impl : {"fused", "foreach"}) {
      const auto& o = sc.at("options");
      OptimizerOptions opts;
      opts.type = o.at("type").get<std::string>();
      opts.implementation = impl;
      opts.weight_decay = hex_double(sc.at("weight_decay"));
      if (opts.type == "sgd") {
        opts.momentum = hex_double(o.at("momentum"));
        opts.dampening = hex_double(o.at("dampening"));
        opts.nesterov = o.at("nesterov").get<bool>();
      } else {
        opts.beta1 = hex_double(o.at("beta1"));
        opts.beta2 = hex_double(o.at("beta2"));
        opts.eps = hex_double(o.at("eps"));
      }
      NamedParameters params;
      for (std::size_t i = 0; i < sc.at("names").size(); ++i) {
        const auto shape = sc.at("shapes")[i].get<std::vector<std::int64_t>>();
        params.emplace_back(sc.at("names")[i].get<std::string>(),
                            hex_tensor(sc.at("params_init")[i], shape).to(at::kFloat).requires_grad_(true));
      }
      Optimizer opt(params, opts);
      ASSERT_EQ(opt.fused(), impl == "fused");
      const std::string what = sc.at("name").get<std::string>() + " " + impl;
      int step = 0;
      for (const auto& st : sc.at("steps")) {
        ++step;
        for (std::size_t i = 0; i < params.size(); ++i) {
          at::Tensor p = params[i].second;
          if (st.at("grads")[i].is_null()) {
            p.mutable_grad().reset();
          } else {
            p.mutable_grad() = hex_tensor(st.at("grads")[i], p.sizes().vec()).to(at::kFloat);
          }
        }
        opt.set_lr(hex_double(st.at("lr")));
        opt.step();
        for (std::size_t i = 0; i < params.size(); ++i) {
          const at::Tensor expected = hex_tensor(st.at("params_after")[i], params[i].second.sizes().vec());
          EXPECT_LT(max_rel_error(params[i].second, expected), 1e-6)
              << what << " step " << step << " " << params[i].first;
        }
      }
    }
  }
}

bool cuda_usable() {
  return at::hasCUDA();
}

TEST(Optimizer, CudaFusedMatchesReference) {
  if (!cuda_usable()) GTEST_SKIP() << "needs a CUDA device";
  expect_matches_reference({"adamw"}, "fused", true, {}, c10::Device(c10::kCUDA, 0));
  expect_matches_reference({"adam"}, "fused", true, {{2, {"fc.bias"}}}, c10::Device(c10::kCUDA, 0));
  expect_matches_reference({.type = "sgd", .momentum = 0.9, .nesterov = true}, "fused", true, {{1, {"fc.bias"}}},
                           c10::Device(c10::kCUDA, 0));
  expect_matches_reference({"adamw"}, "foreach", false, {}, c10::Device(c10::kCUDA, 0));
}

TEST(Optimizer, CudaLoadMovesStateToParameterDevice) {
  if (!cuda_usable()) GTEST_SKIP() << "needs a CUDA device";
  const auto cpu = make_params();
  Optimizer on_cpu(cpu, options_for({"adamw"}, "fused"));
  run(on_cpu, cpu, 1, 2);
  NamedParameters gpu;
  for (const auto& [n, p] : cpu) gpu.emplace_back(n, p.detach().to(c10::kCUDA).requires_grad_(true));
  Optimizer on_gpu(gpu, options_for({"adamw"}, "fused"));
  on_gpu.load_state_dict(on_cpu.state_dict());
  const StateDict sd = on_gpu.state_dict();
  EXPECT_TRUE(sd.at("exp_avg.fc.weight").is_cuda());
  EXPECT_TRUE(sd.at("step.fc.weight").is_cuda()) << "the fused CUDA kernels read the step on the device";
  run(on_cpu, cpu, 3, 4);
  run(on_gpu, gpu, 3, 4);
  for (std::size_t i = 0; i < cpu.size(); ++i) {
    EXPECT_LT(max_rel_error(gpu[i].second, cpu[i].second.detach().to(at::kDouble)), 1e-6) << cpu[i].first;
  }
}

}  // namespace
}  // namespace bellows::train
