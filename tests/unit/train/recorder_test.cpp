// The recorder (train/recorder.h) on its own: a record is the window's means over micro-batches, read once; a window
// with a skipped step names the step and the parameter whose gradient was not finite; FLOPs are counted once, on the
// fit's second step, and not from a step that ran again; the summary table reports the fit.
#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <cmath>
#include <map>

#include "bellows/dist/strategy.h"
#include "bellows/precision/precision.h"
#include "bellows/train/recorder.h"

namespace bellows::train {
namespace recorder_test {

// A sink that keeps what it hears.
struct Heard final : obs::Sink {
  std::vector<obs::StepRecord> steps;
  std::vector<std::string> messages;
  std::vector<obs::RunEnd> ends;
  void on_step(const obs::StepRecord& r) override { steps.push_back(r); }
  void on_message(const std::string& t) override { messages.push_back(t); }
  void on_run_end(const obs::RunEnd& e) override { ends.push_back(e); }
};

double value(const obs::Values& values, const std::string& key) {
  for (const auto& [k, v] : values) {
    if (k == key) return v;
  }
  return std::nan("");
}

// A step's result with these micro-batch losses, samples, gradient norm and per-parameter norms.
StepResult result(const std::vector<float>& losses, std::int64_t samples, float norm, const std::vector<float>& param_norms) {
  StepResult r;
  for (const float l : losses) r.outputs.push_back({at::scalar_tensor(l), {{"mae", at::scalar_tensor(2 * l)}}});
  r.samples = samples;
  r.gradients.norm = at::scalar_tensor(norm);
  r.gradients.skipped = at::scalar_tensor(std::isfinite(norm) ? 0.0f : 1.0f);
  r.gradients.param_norms = at::tensor(param_norms);
  for (std::size_t i = 0; i < param_norms.size(); ++i) r.gradients.owners.push_back(static_cast<std::int32_t>(i));
  return r;
}

struct RecorderBench {
  RecorderBench() {
    options.strategy = std::make_shared<dist::SingleDevice>();
    options.count_flops = false;
    recorder.add_sink(heard);
  }
  TrainerOptions options;
  std::unique_ptr<precision::Precision> policy = precision::make_precision("fp32", c10::Device(c10::kCPU));
  Recorder recorder{options, *policy};
  std::shared_ptr<Heard> heard = std::make_shared<Heard>();
};

// The policy's skip count, as the optimizer phase leaves it after a step with non-finite gradients.
void skip_a_step(precision::Precision& policy) {
  at::Tensor p = at::ones({2}).requires_grad_();
  p.mutable_grad() = at::ones({2});
  policy.step_on_device({p}, at::scalar_tensor(1.0f), [](const at::Tensor&) {});
}

TEST(Recorder, ARecordIsTheWindowsMeansAndNamesASkippedStep) {
  RecorderBench s;
  s.recorder.start_fit(1, 10, 10, 0, {"layers.0.weight", "layers.0.bias"});
  s.recorder.start_epoch(0);
  s.recorder.begin_step(0);
  s.recorder.end_step(result({1.0f, 3.0f}, 8, 2.0f, {1.0f, 1.5f}), 1, 1);
  s.recorder.begin_step(1);
  skip_a_step(*s.policy);
  s.recorder.end_step(result({5.0f}, 4, INFINITY, {1.0f, NAN}), 2, 1);
  const std::string skipped = s.recorder.record({2, 0, 2, 10, 0.25});
  EXPECT_EQ(skipped, "the first at optimizer step 2, in the gradient of layers.0.bias (NaN)");
  ASSERT_EQ(s.heard->steps.size(), 1u);
  const obs::StepRecord& r = s.heard->steps[0];
  EXPECT_EQ(r.step, 2);
  EXPECT_EQ(r.batch_in_epoch, 2);
  EXPECT_EQ(r.lr, 0.25);
  EXPECT_DOUBLE_EQ(value(r.values, "loss"), 3.0) << "the mean over the window's three micro-batches";
  EXPECT_DOUBLE_EQ(value(r.values, "mae"), 6.0);
  EXPECT_EQ(r.task_values, 2u) << "the loss and the task's metric first: what the console shows";
  EXPECT_DOUBLE_EQ(value(r.values, "grad_norm"), 1.0) << "finite norms only: (2 + 0) / 2 steps";
  EXPECT_EQ(value(r.values, "skipped_steps"), 1.0);
  EXPECT_GT(r.samples_per_s, 0);
  EXPECT_EQ(r.phase_ms.size(), obs::kPhases);
  ASSERT_FALSE(s.heard->messages.empty());
  EXPECT_NE(s.heard->messages[0].find("1 of optimizer steps 1-2 skipped: non-finite gradients"), std::string::npos) << s.heard->messages[0];
  // A new window: nothing skipped in it, and an empty window is no record.
  s.recorder.begin_step(2);
  s.recorder.end_step(result({2.0f}, 4, 1.0f, {0.5f, 0.5f}), 3, 1);
  EXPECT_EQ(s.recorder.record({3, 0, 3, 10, 0.25}), "");
  EXPECT_DOUBLE_EQ(value(s.heard->steps.back().values, "loss"), 2.0);
  EXPECT_EQ(s.recorder.record({3, 0, 3, 10, 0.25}), "");
  EXPECT_EQ(s.heard->steps.size(), 2u);
}

TEST(Recorder, FlopsAreCountedOnceOnTheSecondStepAndNotFromAStepThatRanAgain) {
  RecorderBench s;
  s.options.count_flops = true;
  s.recorder.start_fit(1, 10, 10, 0, {"w"});
  s.recorder.start_epoch(0);
  const at::Tensor a = at::randn({4, 8}), b = at::randn({8, 16});  // 2 x 4 x 8 x 16 = 1024 FLOPs a product
  for (std::int64_t step = 0; step < 3; ++step) {
    s.recorder.begin_step(step);
    const at::Tensor c = at::mm(a, b);
    StepResult r = result({1.0f}, 4, 1.0f, {1.0f});
    r.repeated = step == 1;  // the first counted step ran again: its count is no one step's
    s.recorder.end_step(r, step + 1, 1);
    EXPECT_EQ(s.recorder.flops_per_sample(), step < 2 ? 0.0 : 256.0) << "after step " << step + 1;
  }
  bool said = false;
  for (const auto& m : s.heard->messages) said = said || m.find("model FLOPs: 2.56e-07 GFLOP per sample per training step, counted from the shapes of step 3's") != std::string::npos;
  EXPECT_TRUE(said) << ::testing::PrintToString(s.heard->messages);
}

// A model none of whose ops has a FLOP formula: the run says so once (no profiler at every step after), and the
// summary says "not counted" where a count of 0 would read as an MFU of 0.0%.
TEST(Recorder, AStepWithoutCountedOpsIsNotCountedRatherThanZero) {
  RecorderBench s;
  s.options.count_flops = true;
  s.options.peak_flops_per_s = 1e12;
  s.recorder.start_fit(1, 10, 10, 0, {"w"});
  s.recorder.start_epoch(0);
  const at::Tensor a = at::randn({4, 8});
  for (std::int64_t step = 0; step < 4; ++step) {
    s.recorder.begin_step(step);
    const at::Tensor c = at::relu(a);
    s.recorder.end_step(result({1.0f}, 4, 1.0f, {1.0f}), step + 1, 1);
  }
  EXPECT_EQ(s.recorder.flops_per_sample(), 0.0);
  int said = 0;
  for (const auto& m : s.heard->messages) said += m.rfind("model FLOPs: not counted: none of step 2's ops has a FLOP formula", 0) == 0 ? 1 : 0;
  EXPECT_EQ(said, 1) << ::testing::PrintToString(s.heard->messages);
  s.recorder.record({4, 0, 4, 10, 0.1});
  EXPECT_TRUE(std::isnan(value(s.heard->steps.back().values, "mfu"))) << "no MFU in the records";
  FitResult f;
  f.steps = 4;
  f.samples = f.new_samples = 16;
  s.recorder.end_fit(f, 1, "loss", 1);
  ASSERT_EQ(s.heard->ends.size(), 1u);
  std::map<std::string, std::string> rows(s.heard->ends[0].summary.begin(), s.heard->ends[0].summary.end());
  EXPECT_EQ(rows["model FLOPs"].rfind("not counted", 0), 0u) << rows["model FLOPs"];
  EXPECT_EQ(rows.count("achieved"), 0u);
}

TEST(Recorder, TheSummaryTableReportsTheFit) {
  RecorderBench s;
  s.recorder.start_fit(2, 10, 20, 0, {"w"});
  s.recorder.start_epoch(0);
  s.recorder.begin_step(0);
  s.recorder.end_step(result({0.5f}, 4, 1.0f, {1.0f}), 1, 1);
  s.recorder.record({1, 0, 1, 10, 0.1});
  FitResult f;
  f.steps = 1;
  f.samples = f.new_samples = 4;
  f.epochs_completed = 0;
  f.oom_recoveries = 1;
  f.last_eval = 0.125;
  s.recorder.end_fit(f, 2, "loss", 2);
  EXPECT_EQ(f.final_loss, 0.5);
  EXPECT_GT(f.seconds, 0);
  ASSERT_EQ(s.heard->ends.size(), 1u);
  std::map<std::string, std::string> rows(s.heard->ends[0].summary.begin(), s.heard->ends[0].summary.end());
  EXPECT_EQ(rows["optimizer steps"], "1");
  EXPECT_EQ(rows["epochs completed"], "0 of 2");
  EXPECT_EQ(rows["final train loss"], "0.5");
  EXPECT_EQ(rows["last eval loss"], "0.125");
  EXPECT_NE(rows["out-of-memory recoveries"].find("each loaded batch ran as 2 micro-batches"), std::string::npos);
  EXPECT_EQ(rows.count("model FLOPs"), 0u) << "none counted";
}

}  // namespace recorder_test
}  // namespace bellows::train
