// Where a step's time goes (obs/phase_clock.h): laps go to their phases, and the trainer's per-window breakdown
// adds up to the window's step time and finds a slow data source.
#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <numeric>
#include <torch/nn/modules/linear.h>
#include <thread>

#include "bellows/data/synthetic.h"
#include "bellows/data/tensor_source.h"
#include "bellows/models/mlp.h"
#include "bellows/models/tasks.h"
#include "bellows/obs/phase_clock.h"
#include "bellows/train/trainer.h"

namespace bellows::train {
namespace {

using namespace std::chrono_literals;

TEST(PhaseClock, LapsGoToTheirPhasesAndTakeStartsAnew) {
  obs::PhaseClock clock{c10::Device(c10::kCPU)};
  clock.mark();
  std::this_thread::sleep_for(20ms);
  clock.lap(obs::Phase::kData);
  std::this_thread::sleep_for(10ms);
  clock.lap(obs::Phase::kForward);
  clock.lap(obs::Phase::kBackward);
  const auto ms = clock.take();
  EXPECT_GE(ms[static_cast<std::size_t>(obs::Phase::kData)], 20.0);
  EXPECT_LT(ms[static_cast<std::size_t>(obs::Phase::kData)], 200.0);
  EXPECT_GE(ms[static_cast<std::size_t>(obs::Phase::kForward)], 10.0);
  EXPECT_LT(ms[static_cast<std::size_t>(obs::Phase::kBackward)], 5.0);
  EXPECT_EQ(ms[static_cast<std::size_t>(obs::Phase::kOptimizer)], 0.0);
  const auto again = clock.take();
  EXPECT_EQ(std::accumulate(again.begin(), again.end(), 0.0), 0.0);
  EXPECT_STREQ(obs::phase_name(obs::Phase::kOther), "other");
}

// A data source that takes `delay` per batch (a slow disk or decoder).
class SlowBatches final : public data::BatchSource {
 public:
  SlowBatches(data::TensorSource inner, std::chrono::milliseconds delay) : inner_(std::move(inner)), delay_(delay) {}
  void start_epoch(std::int64_t epoch) override { inner_.start_epoch(epoch); }
  std::optional<data::Batch> next() override {
    std::this_thread::sleep_for(delay_);
    return inner_.next();
  }
  std::int64_t batches_per_epoch() const override { return inner_.batches_per_epoch(); }
  std::int64_t remaining_in_epoch() const override { return inner_.remaining_in_epoch(); }
  std::int64_t samples() const override { return inner_.samples(); }
  StateDict state_dict() const override { return inner_.state_dict(); }
  void load_state_dict(const StateDict& s) override { inner_.load_state_dict(s); }

 private:
  data::TensorSource inner_;
  std::chrono::milliseconds delay_;
};

struct PhaseRecorder : obs::Sink {
  std::vector<obs::StepRecord> steps;
  void on_step(const obs::StepRecord& r) override { steps.push_back(r); }
};

// A small MLP (8 -> 32 -> 1) on regression, seeded: the trainer's model and task in these tests.
struct TinyMlp {
  std::shared_ptr<models::MlpImpl> model;
  std::shared_ptr<Task> task;
};
TinyMlp tiny_mlp() {
  torch::manual_seed(0);
  models::MlpOptions mo;
  mo.in_features = 8;
  mo.hidden = {32};
  return {std::make_shared<models::MlpImpl>(mo),
          models::make_regression_task([](torch::nn::Module& m, const at::Tensor& x) { return static_cast<models::MlpImpl&>(m).forward(x); })};
}

TEST(StepTime, TheBreakdownAddsUpToTheStepTimeAndFindsSlowData) {
  auto [model, task] = tiny_mlp();
  data::SyntheticOptions so;
  so.samples = 320;
  so.features = 8;
  data::TensorSourceOptions to;
  to.batch_size = 16;
  SlowBatches slow(data::TensorSource(data::make_synthetic(so), to), 25ms);
  TrainerOptions o;
  o.schedule.type = "constant";
  o.log_every_n_steps = 5;
  o.accumulation_steps = 2;  // phases summed over micro-batches
  Trainer trainer(model, task, o);
  auto recorder = std::make_shared<PhaseRecorder>();
  trainer.add_sink(recorder);
  trainer.fit(slow);
  ASSERT_EQ(recorder->steps.size(), 2u);  // 10 optimizer steps, a record every 5
  for (const auto& r : recorder->steps) {
    ASSERT_EQ(r.phase_ms.size(), obs::kPhases);
    double sum = 0;
    for (const auto& [phase, ms] : r.phase_ms) {
      EXPECT_GE(ms, 0.0) << phase;
      sum += ms;
    }
    // The stated tolerance: within 10% of the step time, or 0.5 ms (the record's own reading falls between windows).
    EXPECT_NEAR(sum, r.step_time_ms, std::max(0.1 * r.step_time_ms, 0.5)) << "step " << r.step;
    EXPECT_EQ(r.phase_ms[0].first, "data");
    EXPECT_GE(r.phase_ms[0].second, 2 * 25.0);  // two micro-batches of 25 ms each per optimizer step
    // 25 ms, not less: under ASan on a loaded machine a tiny MLP's step took ~5 ms a micro-batch.
    EXPECT_GT(r.phase_ms[0].second / sum, 0.5) << "a 25 ms-per-batch source dominates a tiny MLP's step";
  }
}

// An evaluation at an epoch's end lies between two windows: in neither the step time nor the phases of the next
// window (it was in `other` alone, which then exceeded the step time: 2.1 against 1.4 ms in issue 32). An evaluation
// inside an epoch is in both (`other` and the window's wall time).
TEST(StepTime, EvaluationsAddToThePhasesWhereTheyAddToTheStepTime) {
  for (const std::int64_t eval_every : {std::int64_t{0}, std::int64_t{5}}) {
    SCOPED_TRACE(eval_every == 0 ? "evaluation at each epoch's end" : "evaluation every 5 steps");
    auto [model, task] = tiny_mlp();
    data::SyntheticOptions so;
    so.samples = 160;  // 10 batches an epoch
    so.features = 8;
    data::TensorSourceOptions to;
    to.batch_size = 16;
    data::TensorSource train(data::make_synthetic(so), to);
    so.samples = 32;
    SlowBatches val(data::TensorSource(data::make_synthetic(so), to), 40ms);  // 80 ms an evaluation
    TrainerOptions o;
    o.schedule.type = "constant";
    o.epochs = 2;
    o.log_every_n_steps = 5;
    o.eval_every_n_steps = eval_every;
    Trainer trainer(model, task, o);
    auto recorder = std::make_shared<PhaseRecorder>();
    trainer.add_sink(recorder);
    trainer.fit(train, &val);
    ASSERT_EQ(recorder->steps.size(), 4u);
    for (const auto& r : recorder->steps) {
      double sum = 0;
      for (const auto& [phase, ms] : r.phase_ms) sum += ms;
      EXPECT_NEAR(sum, r.step_time_ms, std::max(0.1 * r.step_time_ms, 0.5)) << "step " << r.step;
    }
    if (eval_every > 0) {  // the evaluation after step 5 is in the window of steps 6-10: 80 ms over 5 steps
      EXPECT_GE(recorder->steps[1].step_time_ms, 16.0);
      EXPECT_GE(recorder->steps[1].phase_ms.back().second, 16.0);
      EXPECT_EQ(recorder->steps[1].phase_ms.back().first, "other");
    }
  }
}

class FlopsOfATrainingStep : public ::testing::TestWithParam<std::string> {};

TEST_P(FlopsOfATrainingStep, MatchTheHandCount) {
  // MLP 64 -> 256 -> 1, batch 32, fp32. Per sample, counted by hand (matrix products, 2 m n k):
  //   forward:  2 (64*256 + 256*1)                                = 33,280
  //   backward: layer 2 grad input and grad weight 2 x 2*256*1 = 1,024; layer 1 grad weight 2*64*256 = 32,768
  //             (no grad input for the data)                      = 33,792
  //   total 67,072; elementwise mul/add (the loss) add a few per sample, activations and the optimizer count 0.
  torch::manual_seed(0);
  models::MlpOptions mo;
  mo.in_features = 64;
  mo.hidden = {256};
  mo.out_features = 1;
  auto model = std::make_shared<models::MlpImpl>(mo);
  auto task = models::make_regression_task([](torch::nn::Module& m, const at::Tensor& x) { return static_cast<models::MlpImpl&>(m).forward(x); });
  data::SyntheticOptions so;
  so.samples = 128;
  so.features = 64;
  data::TensorSourceOptions to;
  to.batch_size = 32;
  data::TensorSource source(data::make_synthetic(so), to);
  TrainerOptions o;
  o.schedule.type = "constant";
  o.precision = GetParam();   // under bf16 autocast a counted op runs another inside: counted once
  o.peak_flops_per_s = 1e12;  // a stand-in peak: the record's mfu is gflops / 1000
  Trainer trainer(model, task, o);
  auto recorder = std::make_shared<PhaseRecorder>();
  trainer.add_sink(recorder);
  trainer.fit(source);
  EXPECT_NEAR(trainer.flops_per_sample(), 67072.0, 0.02 * 67072.0);
  ASSERT_FALSE(recorder->steps.empty());
  double gflops = -1, mfu = -1;
  for (const auto& [k, v] : recorder->steps.back().values) {
    if (k == "gflops") gflops = v;
    if (k == "mfu") mfu = v;
  }
  EXPECT_GT(gflops, 0);
  EXPECT_NEAR(mfu, gflops / 1000.0, 1e-12);
  EXPECT_NEAR(gflops, trainer.flops_per_sample() * recorder->steps.back().samples_per_s / 1e9, 1e-9 * gflops);
}

INSTANTIATE_TEST_SUITE_P(Precisions, FlopsOfATrainingStep, ::testing::Values("fp32", "bf16-mixed"));

// A task that trains one weight and ignores its inputs: the batches only carry tokens or images to be counted.
struct UnitsTask : Task {
  StepOutput step(torch::nn::Module& m, const data::Batch& b) override {
    auto& linear = dynamic_cast<torch::nn::LinearImpl&>(m);
    return StepOutput{linear.forward(at::ones({b.size, 1})).pow(2).mean(), {}};
  }
};

double record_value(const obs::StepRecord& r, const std::string& key) {
  for (const auto& [k, v] : r.values) {
    if (k == key) return v;
  }
  return -1;
}

TEST(StepTime, TokensAndPixelsPerSecondBesideSamples) {
  TrainerOptions o;
  o.schedule.type = "constant";
  o.log_every_n_steps = 2;
  o.count_flops = false;
  data::TensorSourceOptions to;
  to.batch_size = 8;
  {  // token ids [32, 5], of which the mask marks 3 per row as real
    at::Tensor mask = at::zeros({32, 5}, at::kLong);
    mask.narrow(1, 0, 3).fill_(1);
    data::TensorSource tokens({{"x", at::randint(100, {32, 5}, at::kLong)}, {"x_mask", mask}, {"y", at::zeros({32, 1})}}, to);
    Trainer t(std::make_shared<torch::nn::LinearImpl>(1, 1), std::make_shared<UnitsTask>(), o);
    auto rec = std::make_shared<PhaseRecorder>();
    t.add_sink(rec);
    t.fit(tokens);
    ASSERT_FALSE(rec->steps.empty());
    for (const auto& r : rec->steps) EXPECT_NEAR(record_value(r, "tokens_per_s") / r.samples_per_s, 3.0, 1e-9);
  }
  {  // images [32, 3, 4, 6]: 24 pixels a sample
    data::TensorSource images({{"x", at::randn({32, 3, 4, 6})}, {"y", at::zeros({32, 1})}}, to);
    Trainer t(std::make_shared<torch::nn::LinearImpl>(1, 1), std::make_shared<UnitsTask>(), o);
    auto rec = std::make_shared<PhaseRecorder>();
    t.add_sink(rec);
    t.fit(images);
    ASSERT_FALSE(rec->steps.empty());
    for (const auto& r : rec->steps) {
      EXPECT_NEAR(record_value(r, "pixels_per_s") / r.samples_per_s, 24.0, 1e-9);
      EXPECT_EQ(record_value(r, "tokens_per_s"), -1);
    }
  }
}

}  // namespace
}  // namespace bellows::train
