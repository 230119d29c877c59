// A training run from a configuration: the schema of a run config (train, optim, schedule, ema, data,
// model, plan keys, with the seeds' flag aliases), the embedded default demo, and run(), which resolves
// the plan, builds data, model and trainer, writes runs/<name>/ and trains. `bellows train` is a thin
// wrapper over this; C++ programs can call it too.
#pragma once

#include <atomic>
#include <cstdio>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "bellows/config/schema.h"    // defines: Schema, Config
#include "bellows/data/loader.h"      // defines: LoaderStats
#include "bellows/plan/plan.h"        // defines: PlanRequest
#include "bellows/train/trainer.h"    // defines: FitResult, TrainerOptions

namespace bellows::train {

// The embedded default: a small MLP on synthetic regression data, under a minute on 2 cores.
extern const char* const kDemoConfig;

// All keys of a run config, with the keys of model `model_name` and the command-line aliases.
config::Schema run_schema(const std::string& model_name);

// Loads `file` (or the demo when absent), applies `args` ("key=value" and alias flags), validates.
config::Config resolve_config(const std::optional<std::filesystem::path>& file, const std::vector<std::string>& args);

// The plan keys of a validated run config (device, precision, threads, data.workers, ...).
plan::PlanRequest plan_request(const config::Config& config);

struct RunOptions {
  const std::atomic<bool>* stop_flag = nullptr;
  std::FILE* console = stdout;  // nullptr: no console output
  int tty = -1;                 // -1: detect
};

struct RunResult {
  FitResult fit;
  data::LoaderStats data;  // the training loader's counters over the run
  std::filesystem::path run_dir;
};

RunResult run(const config::Config& config, const RunOptions& options = {});

}  // namespace bellows::train
