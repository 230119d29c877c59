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
std::vector<std::int64_t> tenths(const RankBytes& b) {
  const auto t = [](std::int64_t v) { return v * 10 / kMB; };
  return {t(b.weights), t(b.gradients), t(b.optimizer), t(b.ema), t(b.activations), t(b.checkpoint)};
}
using Tenths = std::vector<std::int64_t>;

TEST(StrategyMemory, DdpHoldsEveryTensorAndItsCheckpointIsRankZerosHostCopy) {
  for (const int w : {1, 2, 4}) {
    const RankBytes b = bytes("ddp", facts(w));
    EXPECT_EQ(tenths(b), (Tenths{100, 200, 200, 100, 30, 0})) << w;  // the buckets and backward's fresh gradients
    EXPECT_EQ(b.total(), 63 * kMB);
    EXPECT_TRUE(b.unfit.empty());
    // Whole on rank 0: host copies of the weights, the optimizer state and the EMA (40 MB), between steps, where the
    // activations and backward's fresh gradients (13 MB) are gone: 27 MB above the step's peak.
    EXPECT_EQ(bytes("ddp", with_checkpoints(facts(w), "auto")).checkpoint, 27 * kMB) << w;
    EXPECT_EQ(bytes("ddp", with_checkpoints(facts(w), "whole")).checkpoint, 27 * kMB) << w;
    // On a GPU the host copies are not the rank's memory.
    EXPECT_EQ(bytes("ddp", with_checkpoints(facts(w), "whole", /*host_memory=*/false)).checkpoint, 0) << w;
  }
  // Sharded (asked for): each rank writes from what it holds; one process's background write still copies it.
  EXPECT_EQ(bytes("ddp", with_checkpoints(facts(2), "sharded")).checkpoint, 0);
  EXPECT_EQ(bytes("ddp", with_checkpoints(facts(1), "sharded")).checkpoint, 27 * kMB);
}

TEST(StrategyMemory, Zero2ShardsStateAndGradientsAndAWholeCheckpointGathersTheStateOnRankZero) {
  // The weights and the update's buffer (all of them at 1 rank); a share of the gradients and two buckets.
  EXPECT_EQ(tenths(bytes("zero2", facts(1))), (Tenths{200, 100, 200, 100, 30, 0}));
  EXPECT_EQ(tenths(bytes("zero2", facts(2))), (Tenths{150, 70, 100, 100, 30, 0}));
  EXPECT_EQ(tenths(bytes("zero2", facts(4))), (Tenths{125, 45, 50, 100, 30, 0}));
  // auto is sharded under zero2: nothing beside the training state on several ranks.
  EXPECT_EQ(bytes("zero2", with_checkpoints(facts(2), "auto")).checkpoint, 0);
  EXPECT_EQ(bytes("zero2", with_checkpoints(facts(4), "sharded")).checkpoint, 0);
  EXPECT_EQ(bytes("zero2", with_checkpoints(facts(1), "auto")).checkpoint, 27 * kMB);  // one process: its host copy
  // Whole: rank 0 gathers the others' optimizer state (10 MB at 2 ranks) and copies 40 MB to the host; the buckets in
  // flight, the update's buffer and the activations (10 MB) are gone by then.
  EXPECT_EQ(bytes("zero2", with_checkpoints(facts(2), "whole")).checkpoint, 40 * kMB);
  EXPECT_EQ(bytes("zero2", with_checkpoints(facts(4), "whole")).checkpoint, 475 * kMB / 10);  // 15 + 40 - 7.5
  // On a GPU the gathered state is on the device, the host copies are not: 10 MB, within what the step let go.
  EXPECT_EQ(bytes("zero2", with_checkpoints(facts(2), "whole", false)).checkpoint, 0);
  EXPECT_EQ(bytes("zero2", with_checkpoints(facts(4), "whole", false)).checkpoint, 75 * kMB / 10);  // 15 - 7.5
}

TEST(StrategyMemory, Zero1KeepsDdpsGradients) {
  EXPECT_EQ(tenths(bytes("zero1", facts(2))), (Tenths{150, 200, 100, 100, 30, 0}));
  EXPECT_EQ(bytes("zero1", with_checkpoints(facts(2), "whole")).checkpoint, 32 * kMB);  // 10 + 40 - (3 + 10 + 5)
  EXPECT_EQ(bytes("zero1", with_checkpoints(facts(2), "auto")).checkpoint, 0);
}

TEST(StrategyMemory, FsdpShardsTheBlocksWeightsAndAWholeCheckpointGathersEveryWeight) {
  // 2 MB outside + 8 / w in the units between steps; three units (12 MB) and the outside's update while one runs.
  EXPECT_EQ(tenths(bytes("fsdp", facts(1))), (Tenths{240, 100, 200, 100, 30, 0}));
  EXPECT_EQ(tenths(bytes("fsdp", facts(2))), (Tenths{190, 70, 100, 60, 30, 0}));
  EXPECT_EQ(tenths(bytes("fsdp", facts(4))), (Tenths{165, 45, 50, 40, 30, 0}));
  EXPECT_EQ(bytes("fsdp", with_checkpoints(facts(2), "auto")).checkpoint, 0);
  EXPECT_EQ(bytes("fsdp", with_checkpoints(facts(4), "sharded")).checkpoint, 0);
  // Whole at 2 ranks: the units' other half (4 MB), the others' optimizer state (10) and EMA (4) gathered, 40 MB of
  // host copies; 18 MB let go (activations, buckets in flight, three units and the update).
  EXPECT_EQ(bytes("fsdp", with_checkpoints(facts(2), "whole")).checkpoint, 40 * kMB);
  EXPECT_EQ(bytes("fsdp", with_checkpoints(facts(4), "whole")).checkpoint, 495 * kMB / 10);  // 6 + 15 + 6 + 40 - 17.5
  EXPECT_EQ(bytes("fsdp", with_checkpoints(facts(1), "sharded")).checkpoint, 23 * kMB);      // 40 - 17
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
