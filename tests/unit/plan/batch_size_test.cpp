// The batch-size finder (plan/batch_size.h): which steps it measures, what it chooses and what it says, with a
// fake probe whose step needs a fixed number of bytes per sample.
#include "bellows/plan/batch_size.h"

#include <c10/util/Exception.h>
#include <gtest/gtest.h>

#include "bellows/util/error.h"

namespace bellows::plan {
namespace {

// A name of its own: the unit tests are a unity build, and checkpointing_test.cpp's kGiB is an integer.
constexpr double kBytesPerGiB = double(std::int64_t{1} << 30);

struct FakeStep {
  std::int64_t bytes_per_sample = 1000;
  std::int64_t oom_from = 0;  // > 0: steps on this many samples or more throw CUDA's out-of-memory error
  std::vector<std::int64_t> measured;
  int released = 0;
  MicroBatchProbe probe() {
    MicroBatchProbe p;
    p.measure_step = [this](std::int64_t b) -> std::optional<std::int64_t> {
      measured.push_back(b);
      if (oom_from > 0 && b >= oom_from) throw c10::OutOfMemoryError({__func__, __FILE__, __LINE__}, "CUDA out of memory (fake)");
      return b * bytes_per_sample;
    };
    p.release = [this] { ++released; };
    return p;
  }
};

// A budget whose 90% is `usable` bytes.
MicroBatchRequest request(std::int64_t loaded, double usable) {
  MicroBatchRequest r;
  r.loaded_batch = loaded;
  r.memory_budget_gib = usable / 0.9 / kBytesPerGiB;
  return r;
}

TEST(PlanMicroBatch, PowersOfTwoThenBisectionsThenTheFewestParts) {
  FakeStep step;  // 1000 bytes a sample: at most 99 samples in 99,999 bytes
  const MicroBatchChoice c = plan_micro_batch(request(256, 100000), hw::HardwareInfo{}, Plan{}, step.probe());
  EXPECT_EQ(step.measured, (std::vector<std::int64_t>{1, 2, 4, 8, 16, 32, 64, 128, 96, 112, 104}));
  EXPECT_EQ(c.parts, 3);         // 256 in parts of at most 96
  EXPECT_EQ(c.micro_batch, 86);  // 86 + 85 + 85
  EXPECT_EQ(c.entry.key, "micro_batch");
  EXPECT_EQ(c.entry.value, "86 x 3");
  EXPECT_NE(c.entry.reason.find("has 96 samples; each batch of 256 = 3 micro-batch(es) of at most 86"), std::string::npos) << c.entry.reason;
  EXPECT_NE(c.entry.reason.find("measured steps [1: 0.0 MB, 2: 0.0 MB"), std::string::npos) << c.entry.reason;
  EXPECT_NE(c.entry.reason.find("128: 0.1 MB, 96: 0.1 MB"), std::string::npos) << c.entry.reason;
}

TEST(PlanMicroBatch, AWholeBatchThatFitsIsOnePart) {
  FakeStep step;
  const MicroBatchChoice c = plan_micro_batch(request(100, 1e9), hw::HardwareInfo{}, Plan{}, step.probe());
  EXPECT_EQ(step.measured, (std::vector<std::int64_t>{1, 2, 4, 8, 16, 32, 64, 100}));
  EXPECT_EQ(c.parts, 1);
  EXPECT_EQ(c.micro_batch, 100);
  EXPECT_NE(c.entry.reason.find("the whole batch of 100"), std::string::npos) << c.entry.reason;
}

TEST(PlanMicroBatch, WhatIsHeldAndOptimizerStateToComeAreLeftOut) {
  FakeStep step;
  MicroBatchRequest r = request(256, 100000);
  r.held_bytes = 29000;
  r.later_bytes = 6000;  // 64,999 left: 64 samples
  const MicroBatchChoice c = plan_micro_batch(r, hw::HardwareInfo{}, Plan{}, step.probe());
  EXPECT_EQ(c.entry.value, "64 x 4");
  // A CPU tensor limit below the budget is the budget.
  r = request(256, 1e9);
  r.limit_bytes = 75000;
  FakeStep limited;
  const MicroBatchChoice c2 = plan_micro_batch(r, hw::HardwareInfo{}, Plan{}, limited.probe());
  EXPECT_EQ(c2.entry.value, "64 x 4");  // 67,500 usable: 64 fits, 72 does not
  EXPECT_NE(c2.entry.reason.find("cpu_tensor_limit_mb less a 10% margin"), std::string::npos) << c2.entry.reason;
}

TEST(PlanMicroBatch, OutOfMemoryTrialsCountAsTooLargeAndReleaseMemory) {
  FakeStep step;
  step.oom_from = 50;  // the budget would allow 99
  const MicroBatchChoice c = plan_micro_batch(request(256, 100000), hw::HardwareInfo{}, Plan{}, step.probe());
  EXPECT_EQ(step.measured, (std::vector<std::int64_t>{1, 2, 4, 8, 16, 32, 64, 48, 56, 52}));
  EXPECT_EQ(step.released, 3);
  EXPECT_EQ(c.entry.value, "43 x 6");  // 256 in parts of at most 48
  EXPECT_NE(c.entry.reason.find("64: out of memory"), std::string::npos) << c.entry.reason;
}

TEST(PlanMicroBatch, OneSampleThatDoesNotFitIsAResourceError) {
  FakeStep step;
  step.bytes_per_sample = 200000;
  try {
    plan_micro_batch(request(64, 100000), hw::HardwareInfo{}, Plan{}, step.probe());
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kResource);
    EXPECT_NE(e.message().find("a training step on 1 sample needs 0.2 MB"), std::string::npos) << e.message();
  }
}

TEST(PlanMicroBatch, UncountedMemoryRunsWholeBatches) {
  MicroBatchProbe p;
  p.measure_step = [](std::int64_t) { return std::optional<std::int64_t>(); };
  const MicroBatchChoice c = plan_micro_batch(request(32, 1e6), hw::HardwareInfo{}, Plan{}, p);
  EXPECT_EQ(c.entry.value, "32 x 1");
  EXPECT_NE(c.entry.reason.find("not measured"), std::string::npos);
}

}  // namespace
}  // namespace bellows::plan
