// dist.strategy: auto for a job of several processes: the bytes each rank would hold under each strategy, by
// category, and the choice among them. Each strategy's registry entry sizes its own (StrategyEntry::memory,
// dist/memory.h) and says when auto tries it (StrategyEntry::auto_memory_order: ddp, then zero2, then fsdp; zero1
// never): the first whose peak fits the rank's memory with a margin is chosen; where none fits, the one that holds
// least, saying so. The plan decides from byte counts; app/ measures them (the model, the optimizer, a probe step),
// so plan/ knows neither, and it names no strategy.
//
// The model of a rank's memory at its peak (w ranks; the entries' comments say more):
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
//   activations the probe step's peak above the weights, less its gradients (measured on this rank's device, every
//               weight and gradient whole, no communication).
//   checkpoint  with checkpoints on, what a checkpoint adds to the busiest rank's (rank 0's) peak. Layout whole
//               (checkpoint.layout, or auto: the entry's StrategyEntry::checkpoint_layout, whole under ddp): rank 0
//               gathers the others' optimizer state (zero1, zero2, fsdp; under fsdp every weight on every rank and the
//               EMA too) and, on the CPU, makes host copies of every weight, the whole optimizer state and the EMA
//               (on a GPU those are host memory, outside the rank's budget). Layout sharded (auto under zero1, zero2,
//               fsdp): each rank writes its share from the tensors it holds, nothing more; one process's background
//               write copies what it holds. A checkpoint comes between optimizer steps, so the activations, backward's
//               gradients and gather buffers it no longer holds make room: the category is what remains above the
//               step's peak (0 where a checkpoint fits inside it).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "bellows/dist/memory.h"       // defines: MemoryFacts, RankBytes
#include "bellows/hw/hardware_info.h"  // defines: HardwareInfo
#include "bellows/plan/plan.h"         // defines: Plan, PlanEntry

namespace bellows::plan {

inline constexpr double kStrategyMemoryMargin = 0.20;  // a strategy fits when it needs at most 80% of the budget

struct StrategyRequest {
  dist::MemoryFacts facts;              // what each entry sizes its bytes from (world size, the model, the probe step)
  int local_world_size = 1;             // processes on this node: on the CPU they share the host's memory
  std::int64_t activation_samples = 1;  // the probe step's samples
  std::string activation_basis;         // how the probe was taken ("the micro-batch of 32 samples")
  double memory_budget_gib = 0;         // per process; 0: the GPU's free memory, or the host's available memory / processes on the node
  std::int64_t limit_bytes = 0;         // cpu_tensor_limit_mb or gpu_memory_limit_mb (per process): the budget where smaller
};

// One option's bytes per rank, by category.
struct RankMemory : dist::RankBytes {
  std::string strategy;  // the entry's name
  int auto_order = 0;    // StrategyEntry::auto_memory_order (0: auto never takes it)
};

// Every registered strategy with a memory model: auto's options in its order, then the others by name.
std::vector<RankMemory> rank_memory(const StrategyRequest& request);

// "ddp 812 MB (weights 203, gradients 203, optimizer 406, ema 0, activations 0, checkpoint 0)": one option, megabytes.
std::string describe_rank_memory(const RankMemory& option);

struct StrategyChoice {
  std::string name;  // the entry chosen
  PlanEntry entry;   // "strategy", name, why: the budget, each option's bytes per rank
  std::vector<RankMemory> options;
  std::int64_t budget_bytes = 0;
};

StrategyChoice plan_strategy(const StrategyRequest& request, const hw::HardwareInfo& hw, const Plan& plan);

}  // namespace bellows::plan
