// The plan's activation-checkpointing row (`checkpointing:`): the named blocks, or with `auto` every block when
// one measured training step would use more than 80% of the memory budget. The plan decides; the model and the
// trainer are reached through a probe of closures, so plan/ knows neither.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "bellows/hw/hardware_info.h"  // defines: HardwareInfo
#include "bellows/plan/plan.h"         // defines: Plan, PlanEntry

namespace bellows::plan {

struct CheckpointingRequest {
  std::vector<std::string> patterns;  // block name patterns; {"auto"}: decided by measurement; empty: off
  double memory_budget_gib = 0;       // 0: the device's free (GPU) or available (CPU) memory
};

struct CheckpointingProbe {
  std::vector<std::string> blocks;  // the model's checkpointable blocks (empty: none)
  // Checkpoints the blocks matching `patterns`; returns the blocks chosen (kConfig error for a pattern that
  // matches nothing).
  std::function<std::vector<std::string>(const std::vector<std::string>& patterns)> apply;
  std::function<void()> checkpoint_all;
  // The peak memory of one training step on the run's device; nullopt where memory is not counted.
  std::function<std::optional<std::int64_t>()> measure_step;
};

// Applies the decision through the probe and returns the plan row ("checkpointing", "4 blocks", reason).
PlanEntry plan_checkpointing(const CheckpointingRequest& request, const hw::HardwareInfo& hw, const Plan& plan,
                             const CheckpointingProbe& probe);

}  // namespace bellows::plan
