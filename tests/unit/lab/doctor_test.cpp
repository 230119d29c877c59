// bellows doctor (app/doctor.h) classifies constructed cases: a data source that sleeps per batch is input-bound and
// the workers it suggests are shown (measured) to help; the embedded demo's in-memory data is not input-bound; a
// CPU with bf16 instructions running fp32 gets the precision advice exactly when its trial measured a gain; a
// diverging run is traced to the step and tensor by train.detect_anomaly. And detect_anomaly on its own.
#include <ATen/ATen.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <thread>

#include "bellows/lab/doctor.h"
#include "bellows/app/run.h"
#include "bellows/app/schema.h"
#include "bellows/data/source_registry.h"
#include "bellows/data/stream_buffer.h"
#include "bellows/data/tensor_dataset.h"
#include "bellows/hw/hardware_info.h"
#include "bellows/plan/plan.h"
#include "test_util.h"

namespace bellows::lab {
using namespace bellows::app;  // the composition root the tools are built on
namespace {

DoctorOptions quiet(double budget_s) {
  DoctorOptions o;
  o.budget_s = budget_s;
  o.progress = nullptr;
  return o;
}

TEST(Doctor, ASlowSourceIsInputBoundAndTheSuggestedWorkersHelp) {
  const config::Config c = resolve_config(std::nullopt, {"data.source=sleepy_test", "model.in_features=16", "model.hidden=[32]", "data.batch_size=32",
                                                         "data.workers=0", "data.val_fraction=0"});
  const DoctorReport r = doctor(c, quiet(8));
  const DoctorTrial* base = r.trial("baseline");
  ASSERT_NE(base, nullptr);
  EXPECT_EQ(base->workers, 0);
  EXPECT_GT(base->phase_ms[0], 4.0) << "each batch sleeps 5 ms in the training thread";
  const DoctorFinding* input = r.find("input");
  ASSERT_NE(input, nullptr);
  EXPECT_EQ(input->status, "advice") << input->summary << "\n" << r.to_text();
  ASSERT_FALSE(input->advice.empty());
  EXPECT_EQ(input->advice[0].rfind("data.workers=", 0), 0u) << input->advice[0];
  // Measured: the trial with the suggested workers trained faster and waited less.
  const DoctorTrial* trial = r.trial(input->trial);
  ASSERT_NE(trial, nullptr);
  EXPECT_GE(trial->workers, 1);
  // At least the gain doctor advises from: how much more is the machine's (it was 1.41 under ASan with AVX2 kernels,
  // where this test asked for 1.5), a benchmark's question, not this test's.
  EXPECT_GE(input->gain, kMinGain) << r.to_text();
  EXPECT_NEAR(input->gain, trial->samples_per_s / base->samples_per_s, 1e-9);
  EXPECT_LT(trial->phase_ms[0], base->phase_ms[0]);
  // The JSON report carries the same.
  const nlohmann::json j = r.to_json();
  EXPECT_EQ(j["findings"].size(), r.findings.size());
  EXPECT_EQ(j["trials"][0]["name"], "baseline");
}

// Issue 44: a run in a reduced precision (auto's choice on a CPU with bf16 units, or the user's) reported "[ok]
// already a reduced precision" where fp32 was faster; doctor now measures fp32 against it and advises fp32 exactly
// when that trial measured at least kMinGain.
TEST(Doctor, AReducedPrecisionIsComparedWithFp32) {
  const config::Config c = resolve_config(std::nullopt, {"precision=bf16-mixed", "data.samples=4096", "model.hidden=[64]"});
  const DoctorReport r = doctor(c, quiet(4));
  const DoctorTrial* base = r.trial("baseline");
  ASSERT_NE(base, nullptr);
  EXPECT_EQ(base->precision, "bf16-mixed");
  const DoctorFinding* precision = r.find("precision");
  ASSERT_NE(precision, nullptr);
  EXPECT_EQ(precision->summary.find("already a reduced precision"), std::string::npos) << precision->summary;
  if (precision->status == "not measured") {
    EXPECT_NE(precision->summary.find("fp32 might be faster than bf16-mixed"), std::string::npos) << precision->summary;
    return;
  }
  const DoctorTrial* fp32 = r.trial("precision=fp32");
  ASSERT_NE(fp32, nullptr) << r.to_text();
  EXPECT_EQ(fp32->precision, "fp32");
  const double gain = fp32->samples_per_s / base->samples_per_s;
  EXPECT_EQ(precision->status == "advice", gain >= kMinGain) << precision->summary;
  if (gain >= kMinGain) {
    EXPECT_EQ(precision->advice, std::vector<std::string>{"precision=fp32"});
  }
}

TEST(Doctor, AnInMemoryComputeLoopIsNotInputBoundAndPrecisionAdviceIsMeasured) {
#if defined(__SANITIZE_THREAD__)
  GTEST_SKIP() << "ThreadSanitizer instruments bellows' loader but not LibTorch's kernels: the share of the step spent on "
                  "data is not the machine's (measured 10.6% against the 10% threshold)";
#endif
  const config::Config c = resolve_config(std::nullopt, {"precision=fp32", "data.samples=8192"});
  const DoctorReport r = doctor(c, quiet(6));
  const DoctorTrial* base = r.trial("baseline");
  ASSERT_NE(base, nullptr);
  EXPECT_EQ(base->precision, "fp32");
  EXPECT_GE(base->steps, 5);
  const DoctorFinding* input = r.find("input");
  ASSERT_NE(input, nullptr);
  EXPECT_EQ(input->status, "ok") << input->summary;
  EXPECT_TRUE(input->advice.empty());
  const double total = base->phase_ms[0] + base->phase_ms[1] + base->phase_ms[2] + base->phase_ms[3] + base->phase_ms[4] + base->phase_ms[5];
  EXPECT_LT(base->phase_ms[0] / total, kInputBoundFraction);
  // docs/training.md: each trial trains at most as long as the baseline did (up to the step that ends past it; a
  // trial was allowed a second more, issue 32), unless its 5 steps take longer.
  for (const DoctorTrial& t : r.trials) {
    if (t.name == "baseline" || t.steps > 5) {
      EXPECT_LE(t.fit_seconds, base->fit_seconds + std::max(0.3, 3 * t.step_ms / 1e3)) << t.name << "\n" << r.to_text();
    }
  }

  // A precision trial runs exactly where the plan's auto precision is cheaper (bf16 instructions), and its advice
  // is given exactly when that trial measured at least kMinGain.
  plan::PlanRequest auto_precision;
  auto_precision.device = "cpu";
  const bool bf16_cpu = plan::resolve(auto_precision, hw::HardwareInfo::get()).precision == "bf16-mixed";
  const DoctorFinding* precision = r.find("precision");
  ASSERT_NE(precision, nullptr);
  const DoctorTrial* trial = r.trial("precision=bf16-mixed");
  if (bf16_cpu && precision->status != "not measured") {
    ASSERT_NE(trial, nullptr) << r.to_text();
    const double gain = trial->samples_per_s / base->samples_per_s;
    EXPECT_EQ(precision->status == "advice", gain >= kMinGain) << precision->summary;
    EXPECT_EQ(!precision->advice.empty(), gain >= kMinGain);
    EXPECT_NE(precision->evidence.size(), 0u);
  } else {
    EXPECT_EQ(trial, nullptr);
    EXPECT_TRUE(precision->advice.empty());
  }
  // Memory per rank by category, between steps: the weights, no gradient buffers (one process clears its gradients
  // after each step), AdamW's two moments (and a step count per tensor), no EMA; in the memory finding's evidence.
  EXPECT_GT(base->held_mb[0], 0.0);
  EXPECT_EQ(base->held_mb[1], 0.0);
  EXPECT_NEAR(base->held_mb[2], 2 * base->held_mb[0], 0.01 * base->held_mb[0]);
  EXPECT_EQ(base->held_mb[3], 0.0);
  const DoctorFinding* memory = r.find("memory");
  ASSERT_NE(memory, nullptr);
  bool categories = false;
  for (const auto& line : memory->evidence) categories |= line.rfind("tensor memory per rank by category, between steps: weights ", 0) == 0;
  EXPECT_TRUE(categories) << r.to_text();
  // The batch experiment: the finding's gain is the two trials' samples/s ratio.
  const DoctorFinding* overhead = r.find("overhead");
  ASSERT_NE(overhead, nullptr);
  if (const DoctorTrial* twice = r.trial("data.batch_size=512")) {
    EXPECT_EQ(twice->batch_size, 512);
    EXPECT_NEAR(overhead->gain, twice->samples_per_s / base->samples_per_s, 1e-9);
    EXPECT_EQ(overhead->status == "advice", overhead->gain >= kMinGain);
  }
}

TEST(Doctor, ADivergingRunIsTracedToItsFirstNonFiniteTensor) {
  const config::Config c = resolve_config(std::nullopt, {"precision=fp32", "data.samples=4096", "optim.type=sgd", "optim.lr=1e6"});
  const DoctorReport r = doctor(c, quiet(5));
  const DoctorFinding* f = r.find("nonfinite");
  ASSERT_NE(f, nullptr);
  EXPECT_EQ(f->status, "problem") << r.to_text();
  EXPECT_NE(f->summary.find("non-finite at optimizer step"), std::string::npos) << f->summary;
  const DoctorTrial* anomaly = r.trial("train.detect_anomaly=true");
  ASSERT_NE(anomaly, nullptr) << r.to_text();
  EXPECT_NE(anomaly->error.find("non-finite"), std::string::npos) << anomaly->error;
  EXPECT_NE(anomaly->error.find("optimizer step"), std::string::npos) << anomaly->error;
}

TEST(DetectAnomaly, NamesTheBatchTensorThatHoldsANaN) {
  const auto dir = std::filesystem::path(::testing::TempDir()) / ("anomaly_" + std::to_string(getpid()));
  const config::Config c = resolve_config(std::nullopt, {"data.source=stream", "model.in_features=4", "data.batch_size=8", "data.val_fraction=0",
                                                         "train.max_steps=4", "threads=1", "checkpoint.enabled=false", "train.detect_anomaly=true",
                                                         "data.shuffle=false", "output_dir=" + dir.string()});
  RunOptions ro;
  ro.console = nullptr;
  ro.stream = std::make_shared<data::StreamBuffer>(data::stream_buffer_options(c));
  for (int i = 0; i < 32; ++i) {
    at::Tensor x = at::ones({4}) * i;
    if (i == 19) x[2] = NAN;  // in the third batch of 8
    ro.stream->push({{"x", x}, {"y", x.sum().reshape({1})}});
  }
  const Error e = test_support::error_from([&] { run(c, ro); });
  EXPECT_EQ(e.kind(), ErrorKind::kData);
  EXPECT_NE(e.message().find("batch of optimizer step 3"), std::string::npos) << e.message();
  EXPECT_NE(e.message().find("x (1 of 32 values: 1 NaN, 0 infinite)"), std::string::npos) << e.message();
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace bellows::lab
