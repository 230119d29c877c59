// dist.strategy: auto by memory (plan/strategy.h): each option's bytes per rank by category, and the choice of ddp,
// else zero2, else fsdp against the budget with its 20% margin.
#include "bellows/plan/strategy.h"

#include <gtest/gtest.h>

namespace bellows::plan {
namespace {

constexpr std::int64_t kMB = 1000 * 1000;

// 400 MB of weights (100 MB outside the blocks, 4 blocks of 75 MB, all trainable), AdamW, 4 ranks, 10 MB of buckets,
// a probe step peaking at 500 MB (400 of them its gradients: 100 MB of activations).
StrategyRequest request() {
  StrategyRequest r;
  r.world_size = 4;
  r.weight_bytes = 400 * kMB;
  r.trainable_bytes = 400 * kMB;
  r.trainable_tensors = 40;
  r.unit_bytes = 300 * kMB;
  r.largest_unit_bytes = 75 * kMB;
  r.optimizer_states = 2;
  r.bucket_bytes = 10 * kMB;
  r.step_peak_bytes = 500 * kMB;
  r.activation_basis = "the micro-batch of 8 samples";
  return r;
}

const RankMemory& option(const std::vector<RankMemory>& all, const std::string& name) {
  for (const auto& o : all) {
    if (o.strategy == name) return o;
  }
  throw std::runtime_error("no option " + name);
}

TEST(PlanStrategy, BytesPerRankFollowTheModelOfEachStrategy) {
  StrategyRequest r = request();
  r.ema = true;
  const auto all = rank_memory(r);
  ASSERT_EQ(all.size(), 4u);
  const RankMemory& ddp = option(all, "ddp");
  EXPECT_EQ(ddp.weights, 400 * kMB);
  EXPECT_EQ(ddp.gradients, 800 * kMB);  // the buckets and the fresh gradients of backward
  EXPECT_EQ(ddp.optimizer, 800 * kMB);
  EXPECT_EQ(ddp.ema, 400 * kMB);
  EXPECT_EQ(ddp.activations, 100 * kMB);
  EXPECT_EQ(ddp.total(), 2500 * kMB);
  const RankMemory& zero1 = option(all, "zero1");
  EXPECT_EQ(zero1.gradients, 800 * kMB);
  EXPECT_EQ(zero1.optimizer, 200 * kMB);
  EXPECT_EQ(zero1.weights, 500 * kMB);  // and the 100 MB buffer an owner broadcasts its updated weights in
  const RankMemory& zero2 = option(all, "zero2");
  EXPECT_EQ(zero2.gradients, 120 * kMB);  // 100 MB share + two 10 MB buckets
  EXPECT_EQ(zero2.optimizer, 200 * kMB);
  EXPECT_EQ(zero2.weights, 500 * kMB);
  const RankMemory& fsdp = option(all, "fsdp");
  EXPECT_EQ(fsdp.weights, 100 * kMB + 75 * kMB + 225 * kMB + 25 * kMB);  // outside, own share, three units, outside's update
  EXPECT_EQ(fsdp.ema, 175 * kMB);                             // what the rank holds between steps
  EXPECT_EQ(fsdp.gradients, 120 * kMB);
  EXPECT_TRUE(fsdp.unfit.empty());
  EXPECT_EQ(describe_rank_memory(zero2), "zero2 1320 MB (weights 500, gradients 120, optimizer 200, ema 400, activations 100)");
}

TEST(PlanStrategy, DdpWhereItFitsElseZero2ElseFsdp) {
  StrategyRequest r = request();  // ddp 2100 MB, zero2 920 MB, fsdp 845 MB per rank
  r.limit_bytes = 2700 * kMB;     // 80%: 2160
  StrategyChoice c = plan_strategy(r, hw::HardwareInfo{}, Plan{});
  EXPECT_EQ(c.name, "ddp");
  EXPECT_EQ(c.entry.key, "strategy");
  EXPECT_NE(c.entry.reason.find("auto: ddp fits 80% of cpu_tensor_limit_mb (2700 MB)"), std::string::npos) << c.entry.reason;
  EXPECT_NE(c.entry.reason.find("activations measured on the micro-batch of 8 samples"), std::string::npos) << c.entry.reason;
  EXPECT_NE(c.entry.reason.find("fsdp 845 MB (weights 425,"), std::string::npos) << c.entry.reason;
  r.limit_bytes = 2000 * kMB;  // 1600: ddp does not fit, zero2 does
  c = plan_strategy(r, hw::HardwareInfo{}, Plan{});
  EXPECT_EQ(c.name, "zero2");
  r.limit_bytes = 1100 * kMB;  // 880: zero2 (920) does not fit, fsdp (845) does
  c = plan_strategy(r, hw::HardwareInfo{}, Plan{});
  EXPECT_EQ(c.name, "fsdp");
  r.limit_bytes = 700 * kMB;  // 560: none fits; fsdp holds least
  c = plan_strategy(r, hw::HardwareInfo{}, Plan{});
  EXPECT_EQ(c.name, "fsdp");
  EXPECT_NE(c.entry.reason.find("no strategy fits 80% of cpu_tensor_limit_mb (700 MB); fsdp holds least"), std::string::npos) << c.entry.reason;
  // memory_budget_gib is the budget where no smaller limit is set.
  r.limit_bytes = 0;
  r.memory_budget_gib = 1.2;  // 1288 MB, 80%: 1031
  EXPECT_EQ(plan_strategy(r, hw::HardwareInfo{}, Plan{}).name, "zero2");
}

TEST(PlanStrategy, OptionsThatCannotRunAreSkippedAndSaySo) {
  StrategyRequest r = request();
  r.limit_bytes = 1000 * kMB;
  r.fsdp_unfit = "the model has no named blocks to gather one at a time";
  StrategyChoice c = plan_strategy(r, hw::HardwareInfo{}, Plan{});
  EXPECT_EQ(c.name, "zero2");  // does not fit, but holds least of what can run
  EXPECT_NE(c.entry.reason.find("fsdp unfit (the model has no named blocks"), std::string::npos) << c.entry.reason;
  r.trainable_tensors = 3;  // fewer than 4 ranks: no rank may own nothing
  c = plan_strategy(r, hw::HardwareInfo{}, Plan{});
  EXPECT_EQ(c.name, "ddp");
  EXPECT_NE(c.entry.reason.find("zero2 unfit (3 trainable tensors for 4 ranks"), std::string::npos) << c.entry.reason;
}

TEST(PlanStrategy, AProbeStepOutOfMemoryRulesOutDdpAndUncountedMemoryIsSaid) {
  StrategyRequest r = request();
  r.step_peak_bytes = -1;
  r.limit_bytes = 100000 * kMB;
  StrategyChoice c = plan_strategy(r, hw::HardwareInfo{}, Plan{});
  EXPECT_EQ(c.name, "zero2");
  EXPECT_NE(c.entry.reason.find("a probe step on the micro-batch of 8 samples ran out of memory under ddp"), std::string::npos) << c.entry.reason;
  r.step_peak_bytes = -2;
  c = plan_strategy(r, hw::HardwareInfo{}, Plan{});
  EXPECT_EQ(c.name, "ddp");
  EXPECT_NE(c.entry.reason.find("activations not counted on this device"), std::string::npos) << c.entry.reason;
  EXPECT_EQ(c.options[0].activations, 0);
}

TEST(PlanStrategy, TheHostsMemoryIsSharedByTheProcessesOnANode) {
  StrategyRequest r = request();
  hw::HardwareInfo hw;
  hw.memory.available_bytes = 4400 * kMB;
  r.local_world_size = 1;
  EXPECT_EQ(plan_strategy(r, hw, Plan{}).name, "ddp");  // 3520 usable
  r.local_world_size = 4;                               // 1100 each, 880 usable
  const StrategyChoice c = plan_strategy(r, hw, Plan{});
  EXPECT_EQ(c.name, "fsdp");
  EXPECT_EQ(c.budget_bytes, 1100 * kMB);
  EXPECT_NE(c.entry.reason.find("the available memory / 4 processes on this node"), std::string::npos) << c.entry.reason;
}

}  // namespace
}  // namespace bellows::plan
