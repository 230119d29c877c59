// Each strategy's memory model (its registry entry's StrategyEntry::memory, dist/memory.h): the bytes per rank by
// category of a small model at 1, 2 and 4 ranks, without checkpoints and with them, whole and sharded, on the CPU
// (host copies count) and on a GPU (they do not); what fsdp finds in the model's blocks; auto's order.
#include "bellows/dist/memory.h"

#include <gtest/gtest.h>

#include <algorithm>

#include "bellows/config/config.h"
#include "bellows/dist/registry.h"

namespace bellows::dist {
namespace {

constexpr std::int64_t kMB = 1000 * 1000;
const int kIds[16] = {};  // tensor identities: the address of an element each

// 10 MB of weights, all trainable, in 10 tensors: 2 MB outside the blocks and two blocks of 4 MB (two tensors each);
// AdamW (20 MB of state), EMA, 1 MB buckets, a probe step peaking at 13 MB (10 of them its gradients: 3 MB of
// activations).
MemoryFacts facts(int world_size) {
  MemoryFacts f;
  f.world_size = world_size;
  f.weight_bytes = 10 * kMB;
  f.trainable_bytes = 10 * kMB;
  f.trainable_tensors = 10;
  f.blocks = {{"layers.0", {{&kIds[0], 2 * kMB}, {&kIds[1], 2 * kMB}}},
              {"layers.1", {{&kIds[2], 2 * kMB}, {&kIds[3], 2 * kMB}}}};
  f.optimizer_states = 2;
  f.ema = true;
  f.bucket_bytes = kMB;
  f.step_peak_bytes = 13 * kMB;
  return f;
}

MemoryFacts with_checkpoints(MemoryFacts f, const std::string& layout, bool host_memory = true) {
  f.checkpoints = true;
  f.checkpoint_layout = layout;
  f.host_memory = host_memory;
  return f;
}

RankBytes bytes(const std::string& strategy, const MemoryFacts& f) {
  return rank_bytes(find_strategy(strategy), f);
}

// weights, gradients, optimizer, ema, activations, checkpoint in MB (x 10, for the halves and quarters)
using Tenths = std::vector<std::int64_t>;
Tenths tenths(const RankBytes& b) {
  const auto t = [](std::int64_t v) { return v * 10 / kMB; };
  return {t(b.weights), t(b.gradients), t(b.optimizer), t(b.ema), t(b.activations), t(b.checkpoint)};
}

// A strategy's categories at 1, 2 and 4 ranks, without checkpoints.
std::vector<Tenths> at_1_2_4_ranks(const std::string& strategy) {
  return {tenths(bytes(strategy, facts(1))), tenths(bytes(strategy, facts(2))), tenths(bytes(strategy, facts(4)))};
}

// Its checkpoint category at 1, 2 and 4 ranks under `layout`, MB x 10; host_memory false: training on a GPU.
Tenths checkpoint_at_1_2_4_ranks(const std::string& strategy, const std::string& layout, bool host_memory = true) {
  Tenths out;
  for (const int w : {1, 2, 4})
    out.push_back(tenths(bytes(strategy, with_checkpoints(facts(w), layout, host_memory))).back());
  return out;
}

TEST(StrategyMemory, DdpHoldsEveryTensorAndItsCheckpointIsRankZerosHostCopy) {
  // Every rank the same: the buckets and backward's fresh gradients, the whole optimizer state.
  const Tenths each = {100, 200, 200, 100, 30, 0};
  EXPECT_EQ(at_1_2_4_ranks("ddp"), (std::vector<Tenths>{each, each, each}));
  EXPECT_EQ(bytes("ddp", facts(2)).total(), 63 * kMB);
  // Whole (auto under ddp) on rank 0: host copies of the weights, the optimizer state and the EMA (40 MB), between
  // steps, where the activations and backward's fresh gradients (13 MB) are gone: 27 MB above the step's peak.
  EXPECT_EQ(checkpoint_at_1_2_4_ranks("ddp", "auto"), (Tenths{270, 270, 270}));
  EXPECT_EQ(checkpoint_at_1_2_4_ranks("ddp", "whole"), (Tenths{270, 270, 270}));
  // On a GPU the host copies are host memory, not the rank's.
  EXPECT_EQ(checkpoint_at_1_2_4_ranks("ddp", "whole", /*host_memory=*/false), (Tenths{0, 0, 0}));
  // Sharded (asked for): each rank writes from what it holds; one process's background write still copies it.
  EXPECT_EQ(checkpoint_at_1_2_4_ranks("ddp", "sharded"), (Tenths{270, 0, 0}));
}

// zero1, zero2 and fsdp at 1, 2 and 4 ranks, and their checkpoint category under auto (sharded: nothing beside the
// training state on several ranks; one process copies what it holds) and whole (rank 0 gathers the others' optimizer
// state, under fsdp every weight and the EMA too, and copies 40 MB to the host, less what the step let go).
TEST(StrategyMemory, ShardingStrategiesByRanksAndCheckpointLayouts) {
  struct Expected {
    std::string strategy;
    std::vector<Tenths> by_ranks;
    Tenths auto_checkpoint, whole_checkpoint;
  };
  const std::vector<Expected> table = {
      // ddp's gradients; the optimizer state / w and the update's buffer. Whole at 2 ranks: 10 + 40 - (3 + 10 + 5).
      {"zero1",
       {{200, 200, 200, 100, 30, 0}, {150, 200, 100, 100, 30, 0}, {125, 200, 50, 100, 30, 0}},
       {170, 0, 0},
       {170, 320, 395}},
      // A share of the gradients and two buckets. Whole at 2 ranks: 10 + 40 - 10 (activations, buckets, update).
      {"zero2",
       {{200, 100, 200, 100, 30, 0}, {150, 70, 100, 100, 30, 0}, {125, 45, 50, 100, 30, 0}},
       {270, 0, 0},
       {270, 400, 475}},
      // 2 MB outside + 8 / w in the units between steps; three units (12 MB) and the outside's update while one runs.
      // Whole at 2 ranks: 4 + 10 + 4 gathered, 40 copied, 18 let go (activations, buckets, three units, update).
      {"fsdp",
       {{240, 100, 200, 100, 30, 0}, {190, 70, 100, 60, 30, 0}, {165, 45, 50, 40, 30, 0}},
       {230, 0, 0},
       {230, 400, 495}},
  };
  for (const Expected& e : table) {
    EXPECT_EQ(at_1_2_4_ranks(e.strategy), e.by_ranks) << e.strategy;
    EXPECT_EQ(checkpoint_at_1_2_4_ranks(e.strategy, "auto"), e.auto_checkpoint) << e.strategy;
    EXPECT_EQ(checkpoint_at_1_2_4_ranks(e.strategy, "sharded"), e.auto_checkpoint) << e.strategy;
    EXPECT_EQ(checkpoint_at_1_2_4_ranks(e.strategy, "whole"), e.whole_checkpoint) << e.strategy;
  }
  // On a GPU the gathered state is on the device, the host copies are not: zero2's 15 MB at 4 ranks less 7.5 let go.
  EXPECT_EQ(checkpoint_at_1_2_4_ranks("zero2", "whole", /*host_memory=*/false), (Tenths{0, 0, 75}));
}

TEST(StrategyMemory, FsdpFindsItsUnitsInTheBlocksOrSaysWhyItCannotTrain) {
  MemoryFacts f = facts(2);
  f.blocks = {{"layers.0", {{&kIds[0], 1 * kMB}}}, {"layers.1", {{&kIds[1], 3 * kMB}, {&kIds[2], 2 * kMB}}}};
  EXPECT_EQ(bytes("fsdp", f).weights, (10 - 6 + 3 + 3 * 5 + 2) * kMB);  // largest unit 5 MB; 4 MB outside, / 2 updated
  const config::Config units = config::Config::parse("dist:\n  fsdp_units: [\"layers.0\"]\n", "units.yaml");
  f.config = &units;                              // dist.fsdp_units: the first block only
  EXPECT_EQ(bytes("fsdp", f).weights, 17 * kMB);  // 9 outside + 0.5, one unit of 1 MB x 3, 9 / 2 updated
  f.config = nullptr;
  f.blocks[1].trainable.push_back({&kIds[0], 1 * kMB});  // layers.0's tensor in layers.1 too
  EXPECT_EQ(bytes("fsdp", f).unfit, "a weight of block layers.1 is in another unit too (tied)");
  f.blocks.clear();
  EXPECT_EQ(bytes("fsdp", f).unfit, "the model has no named blocks to gather one at a time");
  f = facts(2);
  f.ema_eval = true;
  EXPECT_EQ(bytes("fsdp", f).unfit, "ema.eval: no rank would hold the whole average");
  EXPECT_TRUE(bytes("zero2", f).unfit.empty());
}

TEST(StrategyMemory, TooFewTensorsOrAProbeOutOfMemoryRuleStrategiesOut) {
  MemoryFacts f = facts(4);
  f.trainable_tensors = 3;
  EXPECT_EQ(bytes("zero2", f).unfit, "3 trainable tensors for 4 ranks: a rank would own none");
  EXPECT_EQ(bytes("fsdp", f).unfit, "3 trainable tensors for 4 ranks: a rank would own none");
  EXPECT_TRUE(bytes("ddp", f).unfit.empty());
  f = facts(4);
  f.step_peak_bytes = -1;  // the probe, every gradient whole, ran out of memory: ddp's and zero1's steps would too
  EXPECT_NE(bytes("ddp", f).unfit.find("ran out of memory"), std::string::npos);
  EXPECT_NE(bytes("zero1", f).unfit.find("ran out of memory"), std::string::npos);
  EXPECT_TRUE(bytes("zero2", f).unfit.empty());
  EXPECT_EQ(bytes("zero2", f).activations, 0);
}

TEST(StrategyMemory, AutoTriesDdpThenZero2ThenFsdpFromTheEntries) {
  std::vector<std::pair<int, std::string>> order;
  for (const StrategyEntry& e : strategy_entries()) {
    if (e.auto_memory_order > 0) order.emplace_back(e.auto_memory_order, e.name);
    if (e.auto_memory_order > 0) EXPECT_TRUE(e.memory != nullptr) << e.name;
  }
  std::sort(order.begin(), order.end());
  EXPECT_EQ(order, (std::vector<std::pair<int, std::string>>{{1, "ddp"}, {2, "zero2"}, {3, "fsdp"}}));
  EXPECT_EQ(find_strategy("zero1").auto_memory_order, 0);
}

}  // namespace
}  // namespace bellows::dist
