// The run's Strategy (dist/) from the config's dist block and the launcher's environment: one process trains
// alone (dist::SingleDevice), several started by `bellows launch`, torchrun, srun or mpirun train data parallel
// after meeting at the rendezvous; under dist.strategy: auto on several processes the strategy is chosen by each
// rank's memory once the model is built, before the trainer (plan/strategy.h, from the entries' own memory models).
// Also the plan row that says which, and why.
#pragma once

#include <torch/nn/module.h>

#include <memory>
#include <string>

#include "bellows/config/config.h"          // defines: Config
#include "bellows/data/dataset.h"           // defines: Dataset
#include "bellows/dist/environment.h"       // defines: ProcessInfo
#include "bellows/dist/memory.h"            // defines: MemoryFacts
#include "bellows/dist/strategy.h"          // defines: Strategy
#include "bellows/hw/hardware_info.h"       // defines: HardwareInfo
#include "bellows/models/task.h"            // defines: Task
#include "bellows/plan/plan.h"              // defines: Plan, PlanEntry
#include "bellows/train/trainer_options.h"  // defines: TrainerOptions

namespace bellows::app {

// This process in its job (dist::detect_process), checked against dist.strategy: `single` where the
// environment names several processes is a kConfig error naming both.
dist::ProcessInfo process_info(const config::Config& config);

struct StrategySetup {
  std::shared_ptr<dist::Strategy> strategy;
  // The plan row's reason: after the strategy's describe() where several processes train (`describes`), all of it
  // where one does. choose_by_memory adds its choice.
  std::string why;
  bool describes = false;
  // dist.strategy: auto for several processes: they met as the entry auto joins as (dist::auto_strategy), and the run
  // decides by memory once the model is built (choose_by_memory).
  bool by_memory = false;
};

// Joins the job for a strategy of several processes (the rendezvous: dist.timeout_s bounds it; ranks whose configs
// differ stop there).
StrategySetup make_strategy(const config::Config& config, const dist::ProcessInfo& process, const plan::Plan& plan);

// What the strategies' memory models size a rank from (dist/memory.h), before the trainer exists: the model's weights
// and buffers (each storage once), the parameters the trainer will train (train.freeze applied now, as the trainer
// applies it; the optimizer's list, a tied tensor once), the model's blocks with their trainable tensors, and from the
// config the optimizer's states, the EMA, dist.bucket_mb and the checkpoints; probe-step fields left at 0.
dist::MemoryFacts memory_facts(const config::Config& config, const plan::Plan& plan, torch::nn::Module& model,
                               const train::TrainerOptions& options, int world_size);

// dist.strategy: auto on several processes (setup.by_memory), before the trainer is built: the plan decides by memory
// (plan::plan_strategy) from memory_facts and probe steps on rank 0 (four micro-batches spread over the data, the
// largest peak; single samples under data.batch_size: auto, whose finder later fits the micro-batch to the strategy
// chosen), measured without a trainer. Every rank takes rank 0's choice: where it is another entry than the one the
// job met as, that entry is built on the same process group (dist::StrategyRequest::joined). `setup` gets the
// strategy and the choice's reason.
void choose_by_memory(StrategySetup& setup, const config::Config& config, const hw::HardwareInfo& hw, const plan::Plan& plan,
                      const dist::ProcessInfo& process, torch::nn::Module& model, Task& task, const train::TrainerOptions& options,
                      const data::Dataset& train);

// The plan row "strategy": the strategy's name and why, opening with its describe() as it is now (several processes):
// once the trainer has given it its parameters, a sharding strategy says its shares.
plan::PlanEntry strategy_row(const StrategySetup& setup);

// Rank 0's `text` on every rank (e.g. the run directory rank 0 chose).
std::string broadcast_text(dist::Strategy& strategy, const std::string& text);

}  // namespace bellows::app
