// The trainer of a run, from its config: the keys of train::Trainer's options (train, optim, schedule, ema, scaler,
// checkpoint, profile), the options with the plan's device, precision, channels_last and pinning, the compile key,
// and the process-wide dropout masks setting.
// `bellows train` and the bare-loop benchmark (bench/bare_loop.cpp) read them the same way.
#pragma once

#include <filesystem>

#include "bellows/app/run_settings.h"  // defines: RunSettings
#include "bellows/config/config.h"    // defines: Config
#include "bellows/config/schema.h"    // defines: Schema
#include "bellows/dist/registry.h"    // defines: StrategyEntry
#include "bellows/models/dropout.h"   // defines: DropoutMasks
#include "bellows/plan/plan.h"        // defines: Plan
#include "bellows/train/trainer.h"    // defines: TrainerOptions

namespace bellows::app {

// Declares the keys of the trainer's options (train.*, optim.*, schedule.*, ema.*, scaler.*, checkpoint.*, profile.*),
// each bound once to its field (config/binding.h), with its default, bounds and help.
void add_trainer_keys(config::Schema& schema);

// The trainer options of a validated config, with the plan's device, precision, channels_last and pinning. kConfig
// errors name the key: optim.betas not two values, ema.eval without ema.enabled.
train::TrainerOptions trainer_options(const config::Config& config, const plan::Plan& plan);

// The plan's "length" row: which limit ends the run (train.epochs, train.max_steps, or max_steps alone over as many
// epochs as it takes) and the optimizer steps per epoch, for `batches_per_epoch` batches.
plan::PlanEntry length_entry(const train::TrainerOptions& options, std::int64_t batches_per_epoch);

// The compile key (train/step_graph.h) for a trainer with options `o` and `world_size` processes: sets o.compile
// ("cuda_graph" when asked for it, or when auto and step_graph_unfit finds nothing against it; else "off") and turns
// out-of-memory recovery off under a graph unless train.oom_recovery is true (a captured step's memory is fixed).
// Returns the plan row. What only the trainer knows (the batch-size finder's micro-batches, the checkpointed blocks,
// the optimizer's fused kernels) it checks again at fit(), falling back with a message.
plan::PlanEntry resolve_compile(const RunSettings& run, train::TrainerOptions& o, std::int64_t world_size);

// The trainer's keys as the config writes them, without the plan's device, precision, channels_last and pinning and
// without trainer_options' rule for train.max_steps (accumulation_steps, ema, oom_recovery, optimizer, ...).
train::TrainerOptions trainer_settings(const config::Config& config);

// State tensors the optimizer keeps per trainable parameter: Adam's two moments, SGD's momentum (or none).
int optimizer_states(const config::Config& config);

// The checkpoint.* keys: checkpoint.enabled, checkpoint.layout (auto, whole, sharded: resolved with the strategy by
// checkpoint_layout_entry) and train::CheckpointOptions' keys.
struct CheckpointSettings {
  bool enabled = true;
  std::string layout = "auto";
  train::CheckpointOptions options;
};
CheckpointSettings checkpoint_settings(const config::Config& config);

// The checkpoint.* keys with checkpoints in <dir>/checkpoints (dir empty when checkpoint.enabled is false).
train::CheckpointOptions checkpoint_options(const config::Config& config, const std::filesystem::path& dir);
// checkpoint.layout resolved for the run's strategy (auto: the entry's StrategyEntry::checkpoint_layout) into
// `options`, and its plan row "ckpt_layout". Call once the strategy is final.
plan::PlanEntry checkpoint_layout_entry(const config::Config& config, const dist::StrategyEntry& strategy, train::CheckpointOptions& options);

// The profile.* keys (profile.window "N-M": steps N to M, from 1) with the trace in <dir>/trace.json.
obs::ProfileOptions profile_options(const config::Config& config, const std::filesystem::path& dir);

// The dropout_masks key: parallel or torch.
models::DropoutMasks dropout_masks_setting(const config::Config& config);

}  // namespace bellows::app
