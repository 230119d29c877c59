// One assembly of a run, for both kinds: `bellows train` (app::run, the CLI's commands that train, pipelines, cv) and
// online training inside a program (app::OnlineTrainer, the C API). The sequence is the same: the plan, the job's
// processes, the data (a run's; online training has none until a session), the model and its weights, the run
// directory, the trainer with its plan rows, plan.json, the sinks, the resume. Private to app/.
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

// What the caller asks of a run (app/run.h: the stop flag, the console, the stream buffer, more sinks), and which kind.
struct AssemblyOptions : RunOptions {
  // Online training (app/online.h): one process whatever launched the program, no data at the start (the model's
  // sizes come from the config), a trainer of sessions (TrainerOptions::sessions), checkpoints written only when
  // asked for and not on a stop, and a resume left to the OnlineTrainer (its restore is also the program's call).
  bool online = false;
};

struct AssembledRun {
  plan::Plan plan;  // every row, the ones decided with the model included (what plan.json holds)
  std::shared_ptr<dist::Strategy> strategy;
  std::string strategy_described;  // its describe() in the plan row, before the trainer sharded anything
  std::optional<Loaders> loaders;  // a run's data; online training's sessions make their own
  models::BuiltModel model;
  std::unique_ptr<train::Trainer> trainer;
  std::filesystem::path run_dir;
  std::unique_ptr<obs::CpuTensorLimit> cpu_limit;  // a run's cpu_tensor_limit_mb, for as long as it trains
  std::optional<std::filesystem::path> resume_from;  // online: the checkpoint the config's resume names, to restore
};

// kConfig errors name the key; a rank that does not arrive is a kResource error within dist.timeout_s.
AssembledRun assemble_run(const config::Config& config, const AssemblyOptions& options);

// A fresh directory for the run: <output_dir>/<name>, or <name>-2, -3, ... when that one holds a run.
// A resumed run (resume: set) continues in <output_dir>/<name>. kResource error when it cannot be made.
std::filesystem::path make_run_dir(const config::Config& config);

// The console header: the machine, the GPUs and every plan row with its reason.
std::vector<std::pair<std::string, std::string>> header_rows(const hw::HardwareInfo& hw, const plan::Plan& plan);

}  // namespace bellows::app
