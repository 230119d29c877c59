// dist.strategy: auto for a job of several processes: the bytes each rank would hold under each data-parallel
// strategy, by category, and the choice among them. ddp when the model's weights, gradients, optimizer state, EMA
// and the measured activations fit the rank's memory with a margin; else zero2 (optimizer state and gradients
// sharded); else fsdp (weights sharded too); where none fits, the one that holds least, saying so. The plan decides
// from byte counts; app/ measures them (the model, the optimizer, a probe step), so plan/ knows neither.
//
// The model of a rank's memory at its peak (the end of backward, before the optimizer step; w ranks):
//   weights     ddp: every parameter and buffer. zero1, zero2: the same, plus the flat buffer in which an owner's
//               updated weights are broadcast (1/w of the trainable ones). fsdp: what lies outside the units whole, the
//               units' trainable weights / w, plus three units' worth while one runs (its weights, the buffer they
//               were gathered in, the next unit's prefetched buffer) and the broadcast of the rest's update.
//   gradients   ddp, zero1: twice the trainable bytes (the buckets, kept between steps, and the gradients backward
//               allocates before they are copied into them). zero2, fsdp: the rank's share (/ w) plus the buckets
//               in flight (two of dist.bucket_mb), at most every gradient.
//   optimizer   state tensors per trainable parameter (AdamW 2, SGD with momentum 1) x the trainable bytes; / w for
//               zero1, zero2 and fsdp.
//   ema         a copy of the weights (ema.enabled); fsdp: of what the rank holds between steps.
//   activations the probe step's peak above the weights, less its gradients (measured on this rank's device).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "bellows/hw/hardware_info.h"  // defines: HardwareInfo
#include "bellows/plan/plan.h"         // defines: Plan, PlanEntry

namespace bellows::plan {

inline constexpr double kStrategyMemoryMargin = 0.20;  // a strategy fits when it needs at most 80% of the budget

struct StrategyRequest {
  int world_size = 2;
  int local_world_size = 1;             // processes on this node: on the CPU they share the host's memory
  std::int64_t weight_bytes = 0;        // every parameter (trainable and frozen) and buffer, once
  std::int64_t trainable_bytes = 0;     // the trainable parameters (what has gradients and optimizer state)
  std::int64_t trainable_tensors = 0;   // zero1, zero2 and fsdp give each tensor one owner: at least one per rank
  std::int64_t unit_bytes = 0;          // fsdp: the trainable weights inside its units
  std::int64_t largest_unit_bytes = 0;  // fsdp: the largest unit's
  std::string fsdp_unfit;               // why fsdp cannot train this model ("" where it can)
  int optimizer_states = 2;             // state tensors per trainable parameter
  bool ema = false;
  std::int64_t bucket_bytes = 25LL << 20;  // dist.bucket_mb
  // The probe step: its peak above what was held before it, on `activation_samples` samples; -1: it ran out of
  // memory; -2: memory on the device is not counted.
  std::int64_t step_peak_bytes = 0;
  std::int64_t activation_samples = 1;
  std::string activation_basis;        // how the probe was taken ("the micro-batch of 32 samples")
  double memory_budget_gib = 0;        // per process; 0: the GPU's free memory, or the host's available memory / processes on the node
  std::int64_t limit_bytes = 0;        // cpu_tensor_limit_mb or gpu_memory_limit_mb (per process): the budget where smaller
};

// One option's bytes per rank, by category.
struct RankMemory {
  std::string strategy;  // ddp | zero1 | zero2 | fsdp
  std::int64_t weights = 0, gradients = 0, optimizer = 0, ema = 0, activations = 0;
  std::string unfit;  // why the strategy cannot run this job ("" where it can)
  std::int64_t total() const { return weights + gradients + optimizer + ema + activations; }
};

// The four options in the order ddp, zero1, zero2, fsdp (activations: 0 where the probe did not measure them).
std::vector<RankMemory> rank_memory(const StrategyRequest& request);

// "ddp 812 MB (weights 203, gradients 203, optimizer 406, ema 0, activations 0)": one option, megabytes.
std::string describe_rank_memory(const RankMemory& option);

struct StrategyChoice {
  std::string name;  // ddp | zero2 | fsdp
  PlanEntry entry;   // "strategy", name, why: the budget, each option's bytes per rank
  std::vector<RankMemory> options;
  std::int64_t budget_bytes = 0;
};

StrategyChoice plan_strategy(const StrategyRequest& request, const hw::HardwareInfo& hw, const Plan& plan);

}  // namespace bellows::plan
