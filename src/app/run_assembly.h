// The assembly of a run, for both kinds: `bellows train` (app::run, the CLI's commands that train, pipelines, cv) and
// online training inside a program (app::OnlineTrainer, the C API). Each kind is a list of named stages, and they share
// the common ones: the plan, the seed, the model and its weights, the run directory, the measurements' settings, the
// checkpoint layout, the trainer with its plan rows, plan.json and the sinks. Private to app/.
#pragma once

#include <atomic>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "bellows/app/data_setup.h"      // defines: Loaders
#include "bellows/app/run.h"             // defines: RunOptions
#include "bellows/config/config.h"       // defines: Config
#include "bellows/dist/strategy.h"       // defines: Strategy
#include "bellows/models/registry.h"     // defines: BuiltModel
#include "bellows/obs/memory.h"          // defines: CpuTensorLimit
#include "bellows/obs/sink_registry.h"   // defines: SinkContext
#include "bellows/plan/plan.h"           // defines: Plan
#include "bellows/train/trainer.h"       // defines: Trainer

namespace bellows::app {

struct AssembledRun {
  plan::Plan plan;  // every row, the ones decided with the model included (what plan.json holds)
  std::shared_ptr<dist::Strategy> strategy;
  std::optional<Loaders> loaders;  // a run's data; online training's sessions make their own
  models::BuiltModel model;
  std::unique_ptr<train::Trainer> trainer;
  std::filesystem::path run_dir;
  std::unique_ptr<obs::CpuTensorLimit> cpu_limit;  // a run's cpu_tensor_limit_mb, for as long as it trains
  std::optional<std::filesystem::path> resume_from;  // online: the checkpoint the config's resume names, to restore
};

// A run of `bellows train` (app::run): the plan, the job's processes (they meet first), the data, the model and its
// trial steps, the run directory, the strategy (dist.strategy: auto on several processes: by memory, before the
// trainer), the trainer, the rows decided on measured steps, plan.json and the sinks, the resume. kConfig errors name
// the key; a rank that does not arrive is a kResource error within dist.timeout_s.
AssembledRun assemble_run(const config::Config& config, const RunOptions& options);

// Online training (app/online.h): the same stages where they apply, as one process whatever launched the program, no
// data at the start (the model's sizes come from the config; what a run measures on its first batch comes from the
// config), a trainer of sessions (TrainerOptions::sessions), checkpoints written only when asked for and not on a
// stop, and the resume left to the caller (resume_from; its restore is also the program's call).
AssembledRun assemble_online(const config::Config& config, const RunOptions& options);

// The console header: the machine, the GPUs and every plan row with its reason.
std::vector<std::pair<std::string, std::string>> header_rows(const hw::HardwareInfo& hw, const plan::Plan& plan);

}  // namespace bellows::app
