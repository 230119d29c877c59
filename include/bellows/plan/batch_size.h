// The batch-size finder (data.batch_size: auto): the largest micro-batch whose training step fits in the memory
// budget with a safety margin, found by running real forward/backward steps: powers of two up to the loaded
// batch, then a few bisections between the last that fitted and the first that did not. Each loaded batch
// (train.global_batch_size / ranks) then runs as the fewest micro-batches of at most that size, so the effective
// batch the user asked for is kept. The plan decides; the trainer is reached through a probe, so plan/ knows
// neither it nor the data.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "bellows/hw/hardware_info.h"  // defines: HardwareInfo
#include "bellows/plan/plan.h"         // defines: Plan, PlanEntry

namespace bellows::plan {

inline constexpr double kBatchMemoryMargin = 0.10;  // a step may use at most 90% of what the budget leaves it

struct MicroBatchRequest {
  std::int64_t loaded_batch = 0;  // samples per loaded batch on this rank: the largest micro-batch there can be
  double memory_budget_gib = 0;   // 0: 80% of the available host memory (CPU) or 90% of the GPU's free memory
  std::int64_t held_bytes = 0;    // tensor memory held before a step (weights, in-memory data, ...)
  std::int64_t later_bytes = 0;   // what the run will hold that a probe step does not (optimizer state, EMA)
  std::int64_t limit_bytes = 0;   // a hard limit on tensor memory (cpu_tensor_limit_mb, gpu_memory_limit_mb), the budget where smaller
};

struct MicroBatchProbe {
  // The peak tensor memory of one training step on `samples` samples, above what was held before it; nullopt
  // when the device's memory is not counted. Throws what the step throws (out of memory included).
  std::function<std::optional<std::int64_t>(std::int64_t samples)> measure_step;
  std::function<void()> release;  // after an out-of-memory trial: give cached memory back
};

struct MicroBatchChoice {
  std::int64_t micro_batch = 0;  // samples in the largest micro-batch
  std::int64_t parts = 1;        // micro-batches per loaded batch
  std::vector<std::pair<std::int64_t, std::int64_t>> trials;  // (samples, peak bytes; -1: out of memory), in order
  PlanEntry entry;               // "micro_batch": "64 x 4", with the budget and the trials
};

// kResource error when a step on one sample does not fit; the reason for nullopt from the probe is a plan row
// ("not measured") and one part.
MicroBatchChoice plan_micro_batch(const MicroBatchRequest& request, const hw::HardwareInfo& hw, const Plan& plan,
                                  const MicroBatchProbe& probe);

}  // namespace bellows::plan
