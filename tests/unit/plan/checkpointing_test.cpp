// The activation-checkpointing row of the plan: requested patterns, and `auto` deciding from a measured step
// against the memory budget (a fake probe stands in for the model and the trainer).
#include "bellows/plan/checkpointing.h"

#include <gtest/gtest.h>

namespace bellows::plan {
namespace {

constexpr std::int64_t kGiB = std::int64_t{1} << 30;

struct FakeModel {
  std::vector<std::string> checkpointed;
  std::vector<std::int64_t> steps_measured;  // peak bytes returned per measurement
  CheckpointingProbe probe(std::vector<std::string> blocks, std::int64_t plain, std::int64_t checkpointed_peak) {
    CheckpointingProbe p;
    p.blocks = blocks;
    p.apply = [this](const std::vector<std::string>& patterns) {
      checkpointed = patterns;
      return patterns;
    };
    p.checkpoint_all = [this, blocks] { checkpointed = blocks; };
    p.measure_step = [this, plain, checkpointed_peak]() -> std::optional<std::int64_t> {
      steps_measured.push_back(checkpointed.empty() ? plain : checkpointed_peak);
      return steps_measured.back();
    };
    return p;
  }
};

TEST(PlanCheckpointing, RequestedPatternsAreAppliedWithoutMeasuring) {
  FakeModel m;
  const PlanEntry e = plan_checkpointing({{"encoder.layers.*"}, 0}, hw::HardwareInfo{}, Plan{}, m.probe({"a", "b"}, kGiB, kGiB));
  EXPECT_EQ(e.value, "1 blocks");
  EXPECT_EQ(e.reason, "requested: encoder.layers.*");
  EXPECT_TRUE(m.steps_measured.empty());
  const PlanEntry off = plan_checkpointing({{}, 0}, hw::HardwareInfo{}, Plan{}, m.probe({"a"}, kGiB, kGiB));
  EXPECT_EQ(off.value, "off");
  EXPECT_EQ(off.reason, "default");
}

TEST(PlanCheckpointing, AutoCheckpointsEveryBlockOnlyAboveEightyPercentOfTheBudget) {
  FakeModel fits;  // 3 GiB of a 4 GiB budget: within 80%
  const PlanEntry off = plan_checkpointing({{"auto"}, 4.0}, hw::HardwareInfo{}, Plan{}, fits.probe({"a", "b"}, 3 * kGiB, kGiB));
  EXPECT_EQ(off.value, "off");
  EXPECT_NE(off.reason.find("within 80% of the memory budget (4.00 GiB)"), std::string::npos) << off.reason;
  EXPECT_TRUE(fits.checkpointed.empty());
  FakeModel tight;  // 3.5 GiB of 4 GiB: over 80%, so both blocks, measured again
  const PlanEntry on = plan_checkpointing({{"auto"}, 4.0}, hw::HardwareInfo{}, Plan{}, tight.probe({"a", "b"}, 7 * kGiB / 2, kGiB));
  EXPECT_EQ(on.value, "2 blocks");
  EXPECT_EQ(tight.checkpointed, (std::vector<std::string>{"a", "b"}));
  EXPECT_NE(on.reason.find("peaks at 3.50 GiB, over 80%"), std::string::npos) << on.reason;
  EXPECT_NE(on.reason.find("checkpointed: 1.00 GiB"), std::string::npos) << on.reason;
  // Without checkpointable blocks or memory counting there is nothing to decide.
  FakeModel none;
  EXPECT_EQ(plan_checkpointing({{"auto"}, 4.0}, hw::HardwareInfo{}, Plan{}, none.probe({}, kGiB, kGiB)).reason,
            "auto: the model has no checkpointable blocks");
  CheckpointingProbe uncounted = none.probe({"a"}, kGiB, kGiB);
  uncounted.measure_step = [] { return std::optional<std::int64_t>(); };
  EXPECT_EQ(plan_checkpointing({{"auto"}, 4.0}, hw::HardwareInfo{}, Plan{}, uncounted).reason, "auto: memory on this device is not counted");
}

}  // namespace
}  // namespace bellows::plan
