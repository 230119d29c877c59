// The autotuner: `bellows plan CONFIG [--budget 60s] [--json] [--out plan.json] [--grid]`. Short measured trials
// (lab/trial.h) over the settings that matter on this machine, then a tuned plan (plan.json) that
// `bellows train --plan plan.json` applies, and `--plan auto` reuses from a cache keyed by config and machine.
//
// The space (tune_space) holds one dimension per setting, each value a set of overrides, the configured value first:
//  - precision (only with `plan.allow: [precision]`): the configured one, fp32 (tf32 on a GPU with TF32) and the
//    precision `auto` picks here; none the hardware runs slowly (bf16 on a CPU without AVX512_BF16/AMX);
//  - loader: intra-op threads x loader workers x prefetch depth (on the CPU the two kinds of threads share the cores);
//  - micro_batch (only with `plan.allow: [batch_size]`): the micro-batch halved or doubled with the accumulation
//    doubled or halved, the samples per optimizer step unchanged;
//  - channels_last (convolutional models); cudnn_benchmark (convolutional models on CUDA);
//  - checkpointing (activation checkpointing of every block; where memory can be the limit: on a GPU, or with
//    memory_budget_gib).
// A key set on the command line is the user's: its dimension is not searched.
//
// The tuner (tune): a baseline trial of the configured run, then the dimensions one at a time (coordinate descent),
// each candidate a half-length trial that stops as soon as it is a clear loser (kLoserRatio below the best so far);
// a candidate at least kTuneMinGain faster than the best is confirmed by a full-length trial before it is adopted.
// The loader in two stages: the number of workers (most threads, shallowest prefetch), then for the workers chosen
// fewer threads, and a deeper prefetch only where the step waits for data at least kPrefetchBoundFraction.
// Pruned by measurement: checkpointing while the peak memory is under kCheckpointMemoryFraction of the budget. (Not
// by the time the step waits for data: on 2 cores a loader worker made W1 5% faster while loading in the training
// thread took 1.3% of its step; bench/plan measured it.) Stays inside the budget: a trial that would not fit in what
// is left is not started (the report says so).
// The grid (tune with grid = true): every point of the same space, each a full-length trial; the benchmark that
// checks the tuner (bench/plan/run.py) compares the two.
#pragma once

#include <atomic>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "bellows/app/tuned_plan.h"    // defines: TunedPlan
#include "bellows/lab/trial.h"         // defines: Trial
#include "bellows/config/config.h"     // defines: Config
#include "bellows/hw/hardware_info.h"  // defines: HardwareInfo

namespace bellows::lab {

inline constexpr double kTuneMinGain = 1.03;              // a candidate this much faster is confirmed, then adopted
inline constexpr double kLoserRatio = 0.80;               // a trial below this share of the best so far stops early
inline constexpr std::int64_t kFullTrialSteps = 8;        // optimizer steps of a full trial, at least (6 steady ones)
inline constexpr std::int64_t kCandidateTrialSteps = 5;   // of a candidate's trial (3 steady ones)
inline constexpr double kCheckpointMemoryFraction = 0.50; // peak memory below this share of the budget: not searched
inline constexpr double kPrefetchBoundFraction = 0.05;    // waiting for data below this share: no deeper prefetch

struct TuneValue {
  std::string label;                   // "fp32", "threads=2 workers=1 prefetch=2", ...
  std::vector<std::string> overrides;  // key=value; empty: as configured
};

struct TuneDimension {
  std::string id;                 // precision | loader | micro_batch | channels_last | cudnn_benchmark | checkpointing
  std::vector<TuneValue> values;  // values[0]: the configured setting
  bool changes_numerics = false;  // precision, micro_batch: only searched when plan.allow names them
};

struct TuneSpace {
  std::vector<TuneDimension> dimensions;  // only those with two values or more
  std::vector<std::string> notes;         // what is not searched, and why
  std::size_t grid_size() const;          // points of the exhaustive grid
};

// The space for a validated run config on this hardware. kConfig error for an unknown plan.allow entry.
TuneSpace tune_space(const config::Config& config, const hw::HardwareInfo& hw);

struct TuneOptions {
  double budget_s = 60;           // all trials together, setups included (the grid ignores it)
  double trial_seconds = 0;       // training per full-length trial; 0: from the budget (budget / 30, 0.5 to 5 s)
  bool grid = false;              // every point of the space instead of the tuner
  std::FILE* progress = stderr;   // a line per trial; nullptr: quiet
  const std::atomic<bool>* stop_flag = nullptr;
};

struct TuneTrial {
  Trial trial;
  std::string dimension;  // "" for the baseline and grid points
  std::string status;     // baseline | winner | adopted | slower | loser (stopped early) | not confirmed | failed | grid
};

// What the tuner found: the tuned plan (app/tuned_plan.h: what `bellows train --plan` applies) and every trial.
struct TuneReport : app::TunedPlan {
  std::vector<TuneTrial> trials;

  nlohmann::json to_json() const;  // the plan's fields and the trials
  std::string to_text() const;     // the table for the terminal
};

// Runs the tuner (or the grid) on a validated run config.
TuneReport tune(const config::Config& config, const TuneOptions& options = {});

// Writes the report as a tuned plan file (atomically).
void write_tuned_plan(const TuneReport& report, const std::filesystem::path& path);

}  // namespace bellows::lab
