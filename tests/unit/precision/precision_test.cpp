// The precision policies: names and dtypes, metrics, unknown names, the inf/NaN skip in every policy, fp16's
// loss scaling, bf16's autocast, TF32 backend flags, and the state round trip.
#include "bellows/precision/precision.h"

#include <ATen/ATen.h>
#include <ATen/Context.h>
#include <ATen/autocast_mode.h>
#include <ATen/core/grad_mode.h>
#include <gtest/gtest.h>

#include <limits>
#include <map>

#include "bellows/util/error.h"

namespace bellows::precision {
namespace {

const at::Device kCpu(at::kCPU);

std::map<std::string, double> metrics_of(const Precision& p) {
  std::map<std::string, double> m;
  for (const auto& [k, v] : p.metrics()) m[k] = v;
  return m;
}

at::Tensor precision_param(std::vector<float> values) {
  return at::tensor(values).requires_grad_(true);
}

void sgd(const std::vector<at::Tensor>& params, double lr) {
  at::NoGradGuard no_grad;
  for (const auto& p : params) p.sub_(p.grad() * lr);
}

TEST(Precision, NamesDtypesAndMetrics) {
  const std::map<std::string, c10::ScalarType> want = {
      {"fp32", at::kFloat}, {"tf32", at::kFloat}, {"bf16-mixed", at::kBFloat16}, {"fp16-mixed", at::kHalf}};
  EXPECT_EQ(precision_names(), (std::vector<std::string>{"fp32", "tf32", "bf16-mixed", "fp16-mixed"}));
  for (const auto& [name, dtype] : want) {
    SCOPED_TRACE(name);
    const auto p = make_precision(name, kCpu);
    EXPECT_EQ(p->name(), name);
    EXPECT_EQ(p->autocast_dtype(), dtype);
    const auto m = metrics_of(*p);
    EXPECT_EQ(m.at("skipped_steps"), 0.0);
    if (name == "fp16-mixed") {
      EXPECT_EQ(m.at("loss_scale"), 65536.0);
      EXPECT_EQ(m.size(), 2u);
    } else {
      EXPECT_EQ(m.size(), 1u) << "only fp16 reports a loss scale";
    }
  }
}

TEST(Precision, UnknownNameIsConfigErrorListingValidNames) {
  for (const std::string bad : {"bf16", "float32", "auto", ""}) {
    SCOPED_TRACE(bad);
    try {
      make_precision(bad, kCpu);
      FAIL() << "accepted '" << bad << "'";
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::kConfig);
      const std::string text = e.message() + " " + e.hint();
      for (const char* valid : {"fp32", "tf32", "bf16-mixed", "fp16-mixed"}) {
        EXPECT_NE(text.find(valid), std::string::npos) << text;
      }
    }
  }
  try {
    make_precision("bf16", kCpu);
  } catch (const Error& e) {
    EXPECT_NE(e.hint().find("did you mean 'bf16-mixed'"), std::string::npos) << e.hint();
  }
}

TEST(Precision, EveryPolicySkipsNonFiniteGradients) {
  for (const std::string& name : precision_names()) {
    for (const float bad : {std::numeric_limits<float>::infinity(), std::numeric_limits<float>::quiet_NaN()}) {
      SCOPED_TRACE(name + " " + std::to_string(bad));
      const auto prec = make_precision(name, kCpu);
      std::vector<at::Tensor> params = {precision_param({1, 2}), precision_param({3})};
      params[0].mutable_grad() = at::tensor({0.5f, bad});
      params[1].mutable_grad() = at::tensor({1.0f});
      int calls = 0;
      EXPECT_FALSE(prec->step(params, [&] { ++calls; }).stepped);
      EXPECT_EQ(calls, 0);
      EXPECT_TRUE(params[0].detach().equal(at::tensor({1.0f, 2.0f})));
      EXPECT_EQ(metrics_of(*prec).at("skipped_steps"), 1.0);
      if (name == "fp16-mixed") EXPECT_EQ(metrics_of(*prec).at("loss_scale"), 32768.0);

      const double scale_now = name == "fp16-mixed" ? 32768.0 : 1.0;  // fp16 backed off once
      params[0].mutable_grad() = at::tensor({0.5f, 0.25f}) * scale_now;
      params[1].mutable_grad() = at::tensor({1.0f}) * scale_now;
      EXPECT_TRUE(prec->step(params, [&] { sgd(params, 1.0); }).stepped);
      EXPECT_TRUE(params[0].detach().equal(at::tensor({0.5f, 1.75f})));
      EXPECT_TRUE(params[1].detach().equal(at::tensor({2.0f})));
      EXPECT_EQ(metrics_of(*prec).at("skipped_steps"), 1.0);
    }
  }
}

// The trainer's step: the skip is decided on the device from the caller's flag (the gradient norm's) and,
// under fp16, unscale's own check; the optimizer is always called, with the flag; the count is read later.
TEST(Precision, StepOnDeviceSkipsByFlagAndCountsOnTheDevice) {
  for (const std::string& name : precision_names()) {
    SCOPED_TRACE(name);
    const auto prec = make_precision(name, kCpu);
    std::vector<at::Tensor> params = {precision_param({1, 2})};
    const double scale = name == "fp16-mixed" ? 65536.0 : 1.0;
    std::vector<float> flags;
    auto record = [&](const at::Tensor& found) { flags.push_back(found.item<float>()); };
    // A non-finite gradient that the caller's flag reports.
    params[0].mutable_grad() = at::tensor({0.5f, std::numeric_limits<float>::infinity()});
    prec->unscale(params);
    EXPECT_EQ(prec->step_on_device(params, at::ones({}, at::kFloat), record).item<float>(), 1.0f);
    // fp16: unscale's own check finds it even when the caller's flag says nothing.
    params[0].mutable_grad() = at::tensor({0.5f, std::numeric_limits<float>::quiet_NaN()});
    prec->unscale(params);
    EXPECT_EQ(prec->step_on_device(params, at::zeros({}, at::kFloat), record).item<float>(), name == "fp16-mixed" ? 1.0f : 0.0f);
    // A clean step.
    params[0].mutable_grad() = at::tensor({0.5f, 0.25f}) * (name == "fp16-mixed" ? 16384.0 : 1.0);
    prec->unscale(params);
    EXPECT_EQ(prec->step_on_device(params, at::zeros({}, at::kFloat), record).item<float>(), 0.0f);
    EXPECT_EQ(flags.size(), 3u) << "the optimizer is called on every step, with the flag";
    EXPECT_EQ(prec->skipped_steps(), name == "fp16-mixed" ? 2 : 1);
    EXPECT_EQ(metrics_of(*prec).at("skipped_steps"), name == "fp16-mixed" ? 2.0 : 1.0);
    if (name == "fp16-mixed") {
      EXPECT_TRUE(params[0].grad().equal(at::tensor({0.5f, 0.25f}))) << "unscaled by the twice backed-off scale";
      EXPECT_EQ(metrics_of(*prec).at("loss_scale"), scale / 4);
    }
    // The count is part of the state and survives a round trip.
    const auto again = make_precision(name, kCpu);
    again->load_state_dict(prec->state_dict());
    EXPECT_EQ(again->skipped_steps(), prec->skipped_steps());
  }
}

TEST(Precision, Fp16ScalesTheLossAndUnscalesGradientsBeforeClipping) {
  const auto prec = make_precision("fp16-mixed", kCpu);
  EXPECT_EQ(prec->scale_loss(at::scalar_tensor(0.5f)).item<double>(), 32768.0);
  std::vector<at::Tensor> params = {precision_param({0, 0})};
  params[0].mutable_grad() = at::tensor({3.0f, 4.0f}) * 65536.0;
  prec->unscale(params);
  EXPECT_TRUE(params[0].grad().equal(at::tensor({3.0f, 4.0f})));
  EXPECT_EQ(params[0].grad().norm().item<double>(), 5.0);  // what a clip would see
  prec->unscale(params);
  EXPECT_TRUE(params[0].grad().equal(at::tensor({3.0f, 4.0f})));
  EXPECT_TRUE(prec->step(params, [&] { sgd(params, 1.0); }).stepped);
  EXPECT_TRUE(params[0].detach().equal(at::tensor({-3.0f, -4.0f})));

  GradScalerOptions interval_one;
  interval_one.growth_interval = 1;
  const auto growing = make_precision("fp16-mixed", kCpu, interval_one);
  params[0].mutable_grad() = at::ones({2});
  growing->step(params, [] {});
  EXPECT_EQ(metrics_of(*growing).at("loss_scale"), 131072.0);
}

TEST(Precision, NonFp16PoliciesNeitherScaleNorChangeGradients) {
  for (const std::string name : {"fp32", "tf32", "bf16-mixed"}) {
    SCOPED_TRACE(name);
    GradScalerOptions scaler;
    scaler.init_scale = 1024;  // ignored: only fp16 scales
    const auto prec = make_precision(name, kCpu, scaler);
    const at::Tensor loss = at::scalar_tensor(0.75f);
    EXPECT_EQ(prec->scale_loss(loss).item<float>(), 0.75f);
    std::vector<at::Tensor> params = {precision_param({0, 0})};
    params[0].mutable_grad() = at::tensor({3.0f, 4.0f});
    prec->unscale(params);
    EXPECT_TRUE(params[0].grad().equal(at::tensor({3.0f, 4.0f})));
  }
}

TEST(Precision, AutocastGuardsFollowThePolicy) {
  const at::Tensor a = at::rand({3, 3});
  {
    const auto guard = make_precision("bf16-mixed", kCpu)->autocast();
    ASSERT_NE(guard, nullptr);
    EXPECT_EQ(at::mm(a, a).scalar_type(), at::kBFloat16);
    {
      const auto fp32 = make_precision("fp32", kCpu)->autocast();  // an fp32 region inside bf16
      EXPECT_EQ(at::mm(a, a).scalar_type(), at::kFloat);
    }
    EXPECT_EQ(at::mm(a, a).scalar_type(), at::kBFloat16);
  }
  EXPECT_EQ(at::mm(a, a).scalar_type(), at::kFloat);
  {
    const auto guard = make_precision("fp16-mixed", kCpu)->autocast();
    EXPECT_EQ(at::mm(a, a).scalar_type(), at::kHalf);
  }
  {
    const auto guard = make_precision("tf32", kCpu)->autocast();
    EXPECT_FALSE(at::autocast::is_autocast_enabled(at::kCPU));
    EXPECT_EQ(at::mm(a, a).scalar_type(), at::kFloat);
  }
  EXPECT_FALSE(at::autocast::is_autocast_enabled(at::kCPU));
}

TEST(Precision, ConfigureBackendsSetsTf32Flags) {
  auto& ctx = at::globalContext();
  const bool cublas_before = ctx.allowTF32CuBLAS();
  const bool cudnn_before = ctx.allowTF32CuDNN();
  make_precision("tf32", kCpu)->configure_backends();
  EXPECT_TRUE(ctx.allowTF32CuBLAS());
  EXPECT_TRUE(ctx.allowTF32CuDNN());
  make_precision("bf16-mixed", kCpu)->configure_backends();  // leaves them alone
  EXPECT_TRUE(ctx.allowTF32CuBLAS());
  make_precision("fp32", kCpu)->configure_backends();
  EXPECT_FALSE(ctx.allowTF32CuBLAS());
  EXPECT_FALSE(ctx.allowTF32CuDNN());
  make_precision("fp16-mixed", kCpu)->configure_backends();
  EXPECT_FALSE(ctx.allowTF32CuDNN());
  ctx.setAllowTF32CuBLAS(cublas_before);
  ctx.setAllowTF32CuDNN(cudnn_before);
}

TEST(Precision, StateDictRoundTrip) {
  GradScalerOptions o;
  o.growth_interval = 2;
  const auto a = make_precision("fp16-mixed", kCpu, o);
  std::vector<at::Tensor> params = {precision_param({1})};
  params[0].mutable_grad() = at::ones({1});
  a->step(params, [] {});
  a->step(params, [] {});  // grows to 131072
  params[0].mutable_grad() = at::full({1}, std::numeric_limits<float>::infinity());
  a->step(params, [] {});  // back to 65536, one skip
  params[0].mutable_grad() = at::ones({1});
  a->step(params, [] {});  // tracker 1
  const StateDict state = a->state_dict();

  const auto b = make_precision("fp16-mixed", kCpu);  // default interval: the state brings 2
  b->load_state_dict(state);
  EXPECT_EQ(metrics_of(*b), metrics_of(*a));
  EXPECT_EQ(metrics_of(*b).at("skipped_steps"), 1.0);
  EXPECT_EQ(metrics_of(*b).at("loss_scale"), 65536.0);
  b->step(params, [] {});
  EXPECT_EQ(metrics_of(*b).at("loss_scale"), 131072.0);  // tracker 1 + 1 = interval 2: grows

  const auto bf16 = make_precision("bf16-mixed", kCpu);
  params[0].mutable_grad() = at::full({1}, std::numeric_limits<float>::quiet_NaN());
  bf16->step(params, [] {});
  const StateDict bf16_state = bf16->state_dict();
  EXPECT_EQ(bf16_state.size(), 1u);
  const auto bf16_again = make_precision("bf16-mixed", kCpu);
  bf16_again->load_state_dict(bf16_state);
  EXPECT_EQ(metrics_of(*bf16_again).at("skipped_steps"), 1.0);
  EXPECT_THROW(make_precision("fp16-mixed", kCpu)->load_state_dict(bf16_state), Error);  // no scale in it
}

}  // namespace
}  // namespace bellows::precision
