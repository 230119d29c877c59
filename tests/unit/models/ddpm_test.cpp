// The conditional DDPM (W5): shapes and parameter count, the noise schedules' known values, forward noising
// statistics, gradients against finite differences, the samplers (seeded, batch-size independent, DDIM with
// eta 1 over all steps = ancestral), learning a synthetic conditional task; and Task::predict of the
// regression and classification tasks, which `bellows predict` shares with the DDPM.
#include "bellows/models/ddpm.h"

#include <ATen/ATen.h>
#include <gtest/gtest.h>
#include <torch/nn/modules/linear.h>
#include <torch/optim/adam.h>

#include "bellows/data/tensor_dataset.h"
#include "bellows/models/registry.h"
#include "bellows/models/tasks.h"
#include "bellows/train/checkpointing.h"
#include "model_test_util.h"
#include "test_util.h"

namespace bellows::models {
namespace {

using test_support::error_from;
using test_support::expect_gradients_match;

DdpmOptions tiny_ddpm(std::int64_t steps = 10, const std::string& schedule = "linear") {
  DdpmOptions o;
  o.context_features = 3;
  o.out_features = 4;
  o.hidden = 8;
  o.layers = 3;
  o.time_embedding = 4;
  o.steps = steps;
  o.schedule = schedule;
  return o;
}

std::int64_t ddpm_parameter_count(const torch::nn::Module& m) {
  std::int64_t n = 0;
  for (const auto& p : m.parameters()) n += p.numel();
  return n;
}

TEST(DdpmModel, W5ShapesParameterCountAndScheduleBuffers) {
  torch::manual_seed(0);
  Ddpm model(DdpmOptions{});  // W5: 7 -> 256, hidden 256, 2 layers, T = 50
  const at::Tensor x = at::randn({5, 256}), c = at::randn({5, 7});
  const at::Tensor t = at::tensor({0, 1, 17, 48, 49}, at::kLong);
  EXPECT_EQ(model->forward(x, t, c).sizes(), (std::vector<std::int64_t>{5, 256}));
  // 7*256+256 + (256+32+256)*256+256 + 256*256+256 + 256*256+256
  EXPECT_EQ(ddpm_parameter_count(*model), 273152);
  // The schedule is a pair of buffers: saved with the weights and moved with the module.
  const auto tensors = train::model_tensors(*model);
  ASSERT_TRUE(tensors.count("betas") && tensors.count("alphas_cumprod"));
  EXPECT_EQ(tensors.at("betas").sizes(), (std::vector<std::int64_t>{50}));
  EXPECT_EQ(tensors.at("alphas_cumprod").sizes(), (std::vector<std::int64_t>{50}));
  EXPECT_EQ(model->checkpoint_blocks(), (std::vector<std::string>{"blocks.0"}));
  model->to(at::kDouble);
  EXPECT_EQ(model->alphas_cumprod().scalar_type(), at::kDouble);
}

// With the network's output layer zeroed, what remains is the skip: sqrt(1 - alpha_bar_t) x_t (or nothing).
TEST(DdpmModel, SkipAddsTheLinearNoiseEstimate) {
  for (const bool skip : {true, false}) {
    DdpmOptions o = tiny_ddpm();
    o.skip = skip;
    Ddpm model(o);
    {
      torch::NoGradGuard no_grad;
      for (auto& p : model->named_parameters()) {
        if (p.key().rfind("output.", 0) == 0) p.value().zero_();
      }
    }
    const at::Tensor x = at::randn({3, 4}), c = at::randn({3, 3}), t = at::tensor({0, 5, 9}, at::kLong);
    const at::Tensor expected =
        skip ? (1 - model->alphas_cumprod().index_select(0, t)).sqrt().unsqueeze(1) * x : at::zeros({3, 4});
    EXPECT_TRUE(at::allclose(model->forward(x, t, c), expected, 1e-6, 1e-7)) << "skip " << skip;
  }
}

TEST(DdpmModel, BadShapesAndOptionsAreClearErrors) {
  Ddpm model(tiny_ddpm());
  const auto e = error_from([&] { model->forward(at::randn({2, 5}), at::zeros({2}, at::kLong), at::randn({2, 3})); });
  EXPECT_EQ(e.kind(), ErrorKind::kData);
  EXPECT_NE(e.message().find("[2, 5], expected [batch, 4]"), std::string::npos) << e.message();
  DdpmOptions odd = tiny_ddpm();
  odd.time_embedding = 3;
  EXPECT_EQ(error_from([&] { DdpmImpl m(odd); }).kind(), ErrorKind::kConfig);
  EXPECT_EQ(error_from([&] { make_betas("quadratic", 10); }).kind(), ErrorKind::kConfig);
}

// Known values (computed in float64 by the formulas of Ho et al. scaled by 1000/T, and of Nichol & Dhariwal).
TEST(DdpmSchedule, LinearAndCosineKnownValuesForT50) {
  Ddpm linear(DdpmOptions{});
  const at::Tensor lb = linear->betas().to(at::kDouble), la = linear->alphas_cumprod().to(at::kDouble);
  EXPECT_NEAR(lb[0].item<double>(), 0.002, 1e-9);
  EXPECT_NEAR(lb[49].item<double>(), 0.4, 1e-7);
  EXPECT_NEAR(la[0].item<double>(), 0.998, 1e-7);
  EXPECT_NEAR(la[24].item<double>() / 0.06908898306207267, 1.0, 1e-5);
  EXPECT_NEAR(la[49].item<double>() / 7.74476569922673e-06, 1.0, 1e-5);
  DdpmOptions co;
  co.schedule = "cosine";
  Ddpm cosine(co);
  const at::Tensor cb = cosine->betas().to(at::kDouble), ca = cosine->alphas_cumprod().to(at::kDouble);
  EXPECT_NEAR(cb[0].item<double>(), 0.0017475135338653747, 1e-8);
  EXPECT_NEAR(cb[49].item<double>(), 0.999, 1e-7);  // capped
  EXPECT_NEAR(ca[0].item<double>(), 0.9982524864661346, 1e-7);
  EXPECT_NEAR(ca[24].item<double>(), 0.4938435904406377, 1e-6);
  EXPECT_NEAR(ca[49].item<double>() / 9.71193029871257e-07, 1.0, 1e-4);
}

TEST(DdpmSchedule, AlphasCumprodFallStrictlyInsideZeroOne) {
  for (const char* schedule : {"linear", "cosine"}) {
    for (const std::int64_t steps : {1, 10, 50, 1000}) {
      const at::Tensor betas = make_betas(schedule, steps);
      const at::Tensor ab = (1 - betas).cumprod(0);
      EXPECT_TRUE(betas.gt(0).all().item<bool>() && betas.le(0.999).all().item<bool>()) << schedule << " T=" << steps;
      EXPECT_TRUE(ab.gt(0).all().item<bool>() && ab.lt(1).all().item<bool>()) << schedule << " T=" << steps;
      if (steps > 1)
        EXPECT_TRUE((ab.slice(0, 1) < ab.slice(0, 0, -1)).all().item<bool>()) << schedule << " T=" << steps;
    }
  }
  // T = 1000 is Ho et al.'s schedule itself: 1e-4 .. 0.02.
  const at::Tensor ho = make_betas("linear", 1000);
  EXPECT_NEAR(ho[0].item<double>(), 1e-4, 1e-15);
  EXPECT_NEAR(ho[999].item<double>(), 0.02, 1e-15);
}

TEST(DdpmModel, ForwardNoisingHasTheMarginalMeanAndVariance) {
  torch::manual_seed(1);
  Ddpm model(DdpmOptions{});
  const std::int64_t n = 4000;  // x 256 values = 1,024,000 draws per timestep
  const at::Tensor x0 = at::full({n, 256}, 2.0);
  for (const std::int64_t step : {0, 24, 49}) {
    const at::Tensor t = at::full({n}, step, at::kLong);
    const at::Tensor xt = model->q_sample(x0, t, at::randn({n, 256}));
    const double ab = model->alphas_cumprod()[step].item<double>();
    EXPECT_NEAR(xt.mean().item<double>(), 2.0 * std::sqrt(ab), 0.005) << "t=" << step;
    EXPECT_NEAR(xt.var().item<double>(), 1 - ab, 0.005) << "t=" << step;
  }
}

// Central differences of L = sum(out * w) in float64 against autograd, for sampled parameter and input elements.
TEST(DdpmModel, GradientsMatchFiniteDifferencesInFloat64) {
  torch::manual_seed(2);
  Ddpm model(tiny_ddpm());
  model->to(at::kDouble);
  const at::Tensor x = at::randn({3, 4}, at::kDouble).requires_grad_(),
                   c = at::randn({3, 3}, at::kDouble).requires_grad_();
  const at::Tensor t = at::tensor({0, 4, 9}, at::kLong);
  const at::Tensor w = at::randn({3, 4}, at::kDouble);
  auto loss = [&] { return (model->forward(x, t, c) * w).sum(); };
  std::vector<at::Tensor> checked = {x, c};
  for (const auto& p : model->parameters()) checked.push_back(p);
  EXPECT_GT(checked.size(), 8u);
  EXPECT_GT(expect_gradients_match(loss, checked, 5), 1e-3);  // not a comparison of zeros
}

TEST(DdpmModel, CheckpointedBlocksGiveTheSameGradients) {
  torch::manual_seed(3);
  Ddpm model(tiny_ddpm());
  const at::Tensor x = at::randn({6, 4}), c = at::randn({6, 3}), t = at::randint(0, 10, {6}, at::kLong);
  auto grads = [&] {
    model->zero_grad();
    model->forward(x, t, c).square().sum().backward();
    std::vector<at::Tensor> g;
    for (const auto& p : model->parameters()) g.push_back(p.grad().clone());
    return g;
  };
  const auto plain = grads();
  model->set_checkpointed({"blocks.0", "blocks.1"});
  const auto checkpointed = grads();
  ASSERT_EQ(plain.size(), checkpointed.size());
  for (std::size_t i = 0; i < plain.size(); ++i) EXPECT_TRUE(at::allclose(plain[i], checkpointed[i], 1e-6, 1e-7)) << i;
}

TEST(DdpmSampler, SeededPerRowAndIndependentOfTheBatchSize) {
  torch::manual_seed(4);
  Ddpm model(tiny_ddpm());
  model->eval();
  const at::Tensor c = at::randn({6, 3});
  PredictOptions o;
  o.seed = 11;
  o.samples = 2;
  const at::Tensor all = model->sample(c, o);
  EXPECT_EQ(all.sizes(), (std::vector<std::int64_t>{6, 2, 4}));
  EXPECT_TRUE(all.equal(model->sample(c, o)));
  // Rows 3..5 alone, told where they start, draw the same noise as in the whole batch.
  PredictOptions tail = o;
  tail.first_index = 3;
  EXPECT_TRUE(at::allclose(model->sample(c.slice(0, 3), tail), all.slice(0, 3), 1e-6, 1e-6));
  EXPECT_FALSE(at::allclose(model->sample(c.slice(0, 3), o), all.slice(0, 3)));
  // The two draws of one row differ; another seed gives other samples.
  EXPECT_FALSE(at::allclose(all.select(1, 0), all.select(1, 1)));
  PredictOptions other = o;
  other.seed = 12;
  EXPECT_FALSE(at::allclose(model->sample(c, other), all));
  o.samples = 1;
  EXPECT_EQ(model->sample(c, o).sizes(), (std::vector<std::int64_t>{6, 4}));
  // DDIM with eta 0 is deterministic given x_T, and takes the fewer steps asked for.
  o.steps = 3;
  EXPECT_EQ(model->sample(c, o).sizes(), (std::vector<std::int64_t>{6, 4}));
  EXPECT_TRUE(torch::isfinite(model->sample(c, o)).all().item<bool>());
}

TEST(DdpmSampler, DdimWithEtaOneOverAllStepsIsTheAncestralSampler) {
  for (const char* schedule : {"linear", "cosine"}) {
    torch::manual_seed(5);
    Ddpm model(tiny_ddpm(20, schedule));
    model->to(at::kDouble);
    model->eval();
    const at::Tensor c = at::randn({5, 3}, at::kDouble);
    PredictOptions ddpm;
    ddpm.seed = 3;
    PredictOptions ddim = ddpm;
    ddim.steps = 20;
    ddim.eta = 1.0;
    const at::Tensor a = model->sample(c, ddpm), b = model->sample(c, ddim);
    EXPECT_TRUE(at::allclose(a, b, 1e-7, 1e-8))
        << schedule << ": max difference " << (a - b).abs().max().item<double>();
    ddim.eta = 0.0;  // a different sampler: not the same draws
    EXPECT_FALSE(at::allclose(a, model->sample(c, ddim), 1e-3, 1e-3)) << schedule;
  }
}

TEST(DdpmSampler, BadRequestsAreClearErrors) {
  Ddpm model(tiny_ddpm());
  PredictOptions o;
  const auto wrong = error_from([&] { model->sample(at::randn({2, 5}), o); });
  EXPECT_EQ(wrong.kind(), ErrorKind::kData);
  EXPECT_NE(wrong.message().find("[2, 5], the model expects [rows, 3]"), std::string::npos) << wrong.message();
  o.samples = 0;
  EXPECT_EQ(error_from([&] { model->sample(at::randn({2, 3}), o); }).kind(), ErrorKind::kUsage);
  o.samples = 1;
  o.steps = 11;
  EXPECT_EQ(error_from([&] { model->sample(at::randn({2, 3}), o); }).kind(), ErrorKind::kUsage);
}

TEST(DdpmRegistry, BuildsFromConfigAndChecksTheDataWidths) {
  config::Config c;
  config::Schema s;
  find_model("ddpm").add_keys(s);
  c.set("model.context_features", YAML::Node(3), config::Origin::noted("test"));
  c.set("model.out_features", YAML::Node(4), config::Origin::noted("test"));
  c.set("model.hidden", YAML::Node(8), config::Origin::noted("test"));
  s.validate(c);
  auto data = std::make_shared<data::TensorDataset>(
      std::map<std::string, at::Tensor>{{"x", at::randn({10, 3})}, {"y", at::randn({10, 4})}});
  const BuiltModel built = find_model("ddpm").build(c, ModelContext{data});
  EXPECT_EQ(dynamic_cast<DdpmImpl&>(*built.module).options().steps, 50);
  auto narrow = std::make_shared<data::TensorDataset>(
      std::map<std::string, at::Tensor>{{"x", at::randn({10, 7})}, {"y", at::randn({10, 4})}});
  const auto e = error_from([&] { find_model("ddpm").build(c, ModelContext{narrow}); });
  EXPECT_EQ(e.kind(), ErrorKind::kConfig);
  EXPECT_NE(e.message().find("model.context_features is 3 but the data's inputs 'x' have shape [7]"), std::string::npos)
      << e.message();
  auto wide = std::make_shared<data::TensorDataset>(
      std::map<std::string, at::Tensor>{{"x", at::randn({10, 3})}, {"y", at::randn({10, 5})}});
  EXPECT_NE(
      error_from([&] { find_model("ddpm").build(c, ModelContext{wide}); }).message().find("model.out_features is 4"),
      std::string::npos);
}

// The synthetic "downscaling" task: fine = A c + 0.5 sin(3 c_0 + j) + 0.05 z, with c ~ U(-1, 1)^3.
struct Synthetic {
  at::Tensor a = at::randn({3, 8}, at::TensorOptions().dtype(at::kFloat)) * 0.5;
  at::Tensor mean(const at::Tensor& c) const {
    return c.matmul(a) + 0.5 * at::sin(3 * c.select(1, 0).unsqueeze(1) + at::arange(8, at::kFloat).unsqueeze(0));
  }
};

// Learns the task: the noise-prediction loss (about 1.0 at first) falls below 0.05 within 800 Adam steps of
// batch 128, and the mean of 200 samples per context is within 0.08 RMS of the truth over 8 contexts x 8
// values (the truth's own RMS is about 0.6; the noise is 0.05), with a spread below 0.15, for the ancestral
// sampler (50 steps) and DDIM with 10 steps. A PyTorch replica of this test (same draws) gives loss 0.033,
// RMS error 0.049, spread 0.064 for the ancestral sampler.
TEST(DdpmTask, LearnsASyntheticConditionalTaskAndSamplesItsConditionalMean) {
  // One intra-op thread: the ops are tiny, and on a busy 2-core machine a second, spinning thread made this
  // test take 68 s instead of 2 s. Restored at the end.
  const int threads = at::get_num_threads();
  at::set_num_threads(1);
  struct Restore {
    int n;
    ~Restore() { at::set_num_threads(n); }
  } restore{threads};
  torch::manual_seed(6);
  const Synthetic truth;
  DdpmOptions o;
  o.context_features = 3;
  o.out_features = 8;
  o.hidden = 64;
  o.time_embedding = 16;
  auto model = std::make_shared<DdpmImpl>(o);
  auto task = make_ddpm_task();
  torch::optim::Adam optimizer(model->parameters(), torch::optim::AdamOptions(5e-3));
  double recent = 0;
  const int steps = 800, window = 100, rows = 128;
  for (int step = 0; step < steps; ++step) {
    const at::Tensor c = at::rand({rows, 3}) * 2 - 1;
    data::Batch batch;
    batch.tensors = {{"x", c}, {"y", truth.mean(c) + 0.05 * at::randn({rows, 8})}};
    batch.size = rows;
    const StepOutput out = task->step(*model, batch);
    optimizer.zero_grad();
    out.loss.backward();
    optimizer.step();
    if (step >= steps - window) recent += out.loss.item<double>() / window;
  }
  EXPECT_LT(recent, 0.05) << "mean loss over the last " << window << " steps";

  model->eval();
  const at::Tensor c = at::rand({8, 3}) * 2 - 1;
  data::Batch batch;
  batch.tensors = {{"x", c}};
  batch.size = 8;
  PredictOptions po;
  po.samples = 200;
  po.seed = 9;
  for (const std::int64_t sampler_steps : {0, 10}) {
    po.steps = sampler_steps;
    const at::Tensor samples = task->predict(*model, batch, po);
    ASSERT_EQ(samples.sizes(), (std::vector<std::int64_t>{8, 200, 8}));
    const double error = (samples.mean(1) - truth.mean(c)).square().mean().sqrt().item<double>();
    const double spread = samples.std(1).mean().item<double>();
    EXPECT_LT(error, 0.08) << "sampler steps " << sampler_steps << " (0: ancestral)";
    EXPECT_LT(spread, 0.15) << "sampler steps " << sampler_steps;
    std::printf("[ ddpm ] loss %.4f; sampler steps %lld: RMS |mean - truth| %.4f, mean spread %.4f (truth 0.05)\n",
                recent, static_cast<long long>(sampler_steps), error, spread);
  }
}

TEST(DdpmTask, StepIsAScalarMseWithGradients) {
  torch::manual_seed(7);
  auto model = std::make_shared<DdpmImpl>(tiny_ddpm());
  data::Batch batch;
  batch.tensors = {{"x", at::randn({16, 3})}, {"y", at::randn({16, 4})}};
  batch.size = 16;
  const StepOutput out = make_ddpm_task()->step(*model, batch);
  EXPECT_EQ(out.loss.dim(), 0);
  EXPECT_GT(out.loss.item<double>(), 0);
  out.loss.backward();
  for (const auto& p : model->parameters()) EXPECT_TRUE(p.grad().defined());
}

// Task::predict of the generic tasks: outputs, class probabilities; deterministic tasks refuse samples > 1;
// a task without predict() is a usage error.
TEST(TaskPredict, RegressionOutputsAndClassificationProbabilities) {
  torch::manual_seed(8);
  torch::nn::Linear linear(5, 3);
  Forward forward = [](torch::nn::Module& m, const at::Tensor& x) {
    return static_cast<torch::nn::LinearImpl&>(m).forward(x);
  };
  data::Batch batch;
  batch.tensors = {{"x", at::randn({4, 5})}};
  batch.size = 4;
  const at::Tensor logits = linear->forward(batch.at("x"));
  const at::Tensor out = make_regression_task(forward)->predict(*linear, batch, {});
  EXPECT_TRUE(out.equal(logits.detach()));
  EXPECT_FALSE(out.requires_grad());
  const at::Tensor probs = make_classification_task(forward)->predict(*linear, batch, {});
  EXPECT_TRUE(at::allclose(probs, logits.softmax(1)));
  EXPECT_TRUE(at::allclose(probs.sum(1), at::ones({4})));
  PredictOptions many;
  many.samples = 3;
  EXPECT_EQ(error_from([&] { make_regression_task(forward)->predict(*linear, batch, many); }).kind(),
            ErrorKind::kUsage);

  struct NoPredict final : Task {
    StepOutput step(torch::nn::Module&, const data::Batch&) override { return {}; }
  } plain;
  const auto e = error_from([&] { plain.predict(*linear, batch, {}); });
  EXPECT_EQ(e.kind(), ErrorKind::kUsage);
  EXPECT_NE(e.message().find("does not predict"), std::string::npos);
}

}  // namespace
}  // namespace bellows::models
