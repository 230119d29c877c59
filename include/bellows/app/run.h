// A training run from a configuration: run() resolves the plan, builds data, model and trainer, writes
// runs/<name>/ and trains. `bellows train` is a thin wrapper over this, and so are pipelines and
// cross-validation; C++ programs can call it too (the key schema is in app/schema.h).
#pragma once

#include <atomic>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <vector>

// Light on purpose (no tensor or module headers): the CLI's train, cv and bench commands include it.
#include "bellows/config/config.h"          // defines: Config
#include "bellows/config/schema.h"          // defines: Schema
#include "bellows/data/pipeline_stats.h"    // defines: LoaderStats
#include "bellows/plan/plan.h"              // defines: PlanRequest
#include "bellows/train/fit_result.h"       // defines: FitResult

namespace bellows::data {
class StreamBuffer;
}
namespace bellows::obs {
class Sink;
}
namespace bellows::hw {
struct HardwareInfo;
}
namespace bellows::dist {
struct ProcessInfo;
}

namespace bellows::app {

// Declares the plan's keys (device, precision, threads, deterministic, cudnn_benchmark, cpu_allocator, channels_last,
// data.workers, data.pin_memory); plan_request reads them from a validated run config.
void add_plan_keys(config::Schema& schema);
plan::PlanRequest plan_request(const config::Config& config);
// The plan of the config with `precision: auto`: what this machine would pick (the doctor, the tuner and the
// optimization matrix compare it with the configured precision).
plan::Plan plan_with_auto_precision(const config::Config& config, const hw::HardwareInfo& hw);

struct RunOptions {
  const std::atomic<bool>* stop_flag = nullptr;
  std::FILE* console = stdout;  // nullptr: no console output
  int tty = -1;                 // -1: detect
  std::shared_ptr<data::StreamBuffer> stream;  // the samples of data.source: stream (pushed by the program)
  std::vector<std::shared_ptr<obs::Sink>> sinks;  // more sinks besides the console, metrics.jsonl and TensorBoard
  // Online training: the job of training processes the program set up (bellows_create_job, bellows_create_mpi); null:
  // the calling process trains alone, whatever launched it.
  const dist::ProcessInfo* job = nullptr;
  bool console_sessions_only = false;  // the console shows the header, messages and warnings, not steps or epochs
};

struct RunResult {
  train::FitResult fit;
  data::LoaderStats data;  // the training loader's counters over the run
  std::filesystem::path run_dir;
};

RunResult run(const config::Config& config, const RunOptions& options = {});

}  // namespace bellows::app
