// Replays tests/golden/grad_scaler.json, recorded from PyTorch's torch.amp.GradScaler("cpu") with SGD, through
// bellows' GradScaler: scales and growth trackers must match exactly, unscaled gradients bit for bit, and the
// parameters to 1e-7 relative. Regenerate with tests/golden/gen_grad_scaler.py (see tests/golden/README.md).
#include <ATen/ATen.h>
#include <ATen/core/grad_mode.h>
#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>
#include <nlohmann/json.hpp>

#include "bellows/precision/grad_scaler.h"
#include "test_paths.h"

namespace bellows::precision {
namespace {

using nlohmann::json;

// Floats are stored as float.hex() strings ("0x1.8p+3", "inf", "-inf", "nan"); strtod reads all of them.
double hex_double(const json& j) {
  return std::strtod(j.get<std::string>().c_str(), nullptr);
}

at::Tensor hex_tensor(const json& values, const std::vector<std::int64_t>& shape) {
  std::vector<float> v;
  for (const json& x : values) v.push_back(static_cast<float>(hex_double(x)));
  return at::tensor(v).reshape(shape);
}

json load_golden() {
  const std::string path = std::string(BELLOWS_GOLDEN_DIR) + "/grad_scaler.json";
  std::ifstream in(path);
  EXPECT_TRUE(in.good()) << "cannot read " << path;
  return json::parse(in);
}

// Equality with NaN == NaN (skipped steps keep their non-finite gradients; infinities compare as the largest
// finite values of their sign).
bool same_values(const at::Tensor& a, const at::Tensor& b) {
  return a.isnan().equal(b.isnan()) && a.nan_to_num(0).equal(b.nan_to_num(0));
}

void replay(const json& sc) {
  const json& o = sc["options"];
  GradScalerOptions options;
  options.init_scale = hex_double(o["init_scale"]);
  options.growth_factor = hex_double(o["growth_factor"]);
  options.backoff_factor = hex_double(o["backoff_factor"]);
  options.growth_interval = o["growth_interval"].get<std::int64_t>();
  GradScaler scaler(options);
  const double lr = hex_double(sc["lr"]);

  std::vector<std::vector<std::int64_t>> shapes = sc["shapes"].get<std::vector<std::vector<std::int64_t>>>();
  std::vector<at::Tensor> params;
  for (std::size_t i = 0; i < shapes.size(); ++i) {
    params.push_back(hex_tensor(sc["params_init"][i], shapes[i]).requires_grad_(true));
  }
  const at::Tensor frozen_init = hex_tensor(sc["frozen_init"], {3});
  at::Tensor frozen = frozen_init.clone().requires_grad_(true);  // in the list, never with a gradient
  std::vector<at::Tensor> all = params;
  all.push_back(frozen);

  // torch.optim.SGD(momentum=0, foreach=False): p.add_(grad, alpha=-lr) for every parameter with a gradient.
  auto sgd = [&] {
    at::NoGradGuard no_grad;
    for (const at::Tensor& p : all) {
      if (p.grad().defined()) p.add_(p.grad(), -lr);
    }
  };

  const json& steps = sc["steps"];
  for (std::size_t s = 0; s < steps.size(); ++s) {
    SCOPED_TRACE(testing::Message() << sc["name"].get<std::string>() << " step " << s);
    const json& st = steps[s];
    EXPECT_EQ(scaler.scale(at::ones({})).item<double>(), hex_double(st["scaled_one"]));
    EXPECT_EQ(scaler.get_scale(), hex_double(st["scale_before"]));
    for (std::size_t i = 0; i < params.size(); ++i) {
      params[i].mutable_grad() = hex_tensor(st["grads"][i], shapes[i]);
    }
    if (st["explicit_unscale"].get<bool>()) {
      scaler.unscale_(all);
      scaler.unscale_(all);  // PyTorch raises here; bellows makes it a no-op, which must not change the result
    }
    const bool stepped = scaler.step(all, sgd);
    scaler.update();
    EXPECT_EQ(!stepped, st["skipped"].get<bool>());
    EXPECT_EQ(scaler.last_step_skipped(), st["skipped"].get<bool>());
    EXPECT_EQ(scaler.get_scale(), hex_double(st["scale_after"]));
    EXPECT_EQ(scaler.growth_tracker(), st["growth_tracker_after"].get<std::int64_t>());
    for (std::size_t i = 0; i < params.size(); ++i) {
      const at::Tensor want_grad = hex_tensor(st["grads_after"][i], shapes[i]);
      EXPECT_TRUE(same_values(params[i].grad(), want_grad))
          << "grad " << i << ": " << params[i].grad() << " want " << want_grad;
      const at::Tensor want = hex_tensor(st["params_after"][i], shapes[i]);
      const at::Tensor got = params[i].detach();
      EXPECT_TRUE(at::allclose(got, want, /*rtol=*/1e-7, /*atol=*/0))
          << "param " << i << ": " << got << " want " << want;
    }
  }
  EXPECT_FALSE(frozen.grad().defined());
  EXPECT_TRUE(frozen.detach().equal(frozen_init));

  std::int64_t skipped = 0;
  for (const json& st : steps) skipped += st["skipped"].get<bool>() ? 1 : 0;
  EXPECT_EQ(scaler.skipped_steps(), skipped);
  const json& fin = sc["final_state_dict"];
  const StateDict state = scaler.state_dict();
  EXPECT_EQ(get_double(state, "scale"), hex_double(fin["scale"]));
  EXPECT_EQ(get_int(state, "growth_tracker"), fin["_growth_tracker"].get<std::int64_t>());
  EXPECT_EQ(get_double(state, "growth_factor"), hex_double(fin["growth_factor"]));
  EXPECT_EQ(get_double(state, "backoff_factor"), hex_double(fin["backoff_factor"]));
  EXPECT_EQ(get_int(state, "growth_interval"), fin["growth_interval"].get<std::int64_t>());
}

TEST(GradScalerGolden, MatchesPyTorchDefaultFactors) {
  const json golden = load_golden();
  ASSERT_EQ(golden["scenarios"][0]["name"], "default_factors");
  replay(golden["scenarios"][0]);
}

TEST(GradScalerGolden, MatchesPyTorchOddFactors) {
  const json golden = load_golden();
  ASSERT_EQ(golden["scenarios"][1]["name"], "odd_factors");
  replay(golden["scenarios"][1]);
}

// The golden file itself must exercise what it claims to, or the replays above prove little.
TEST(GradScalerGolden, CoversGrowthBackoffInfAndNaN) {
  const json golden = load_golden();
  int grew = 0, backed_off = 0, inf = 0, nan = 0, explicit_unscale = 0;
  for (const json& sc : golden["scenarios"]) {
    for (const json& st : sc["steps"]) {
      const double before = hex_double(st["scale_before"]), after = hex_double(st["scale_after"]);
      grew += after > before;
      backed_off += after < before;
      explicit_unscale += st["explicit_unscale"].get<bool>();
      for (const json& inj : st["injected"]) {
        const double v = hex_double(inj[2]);
        inf += std::isinf(v);
        nan += std::isnan(v);
      }
    }
  }
  EXPECT_GE(grew, 3);
  EXPECT_GE(backed_off, 3);
  EXPECT_GE(inf, 2);
  EXPECT_GE(nan, 2);
  EXPECT_GE(explicit_unscale, 2);
}

}  // namespace
}  // namespace bellows::precision
