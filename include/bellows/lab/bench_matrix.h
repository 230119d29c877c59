// `bellows bench CONFIG --matrix`: the seeds' "expected speed-up" tables (AMP ~2x, prefetching 20-40%, cuDNN
// benchmark 10-30%, activation checkpointing ~50% less memory for ~30% more time) measured on this machine and
// workload. The baseline is the configured run; each row changes one optimization (on where it is off, off where
// it is on): precision, loader workers, prefetch depth, channels_last, fused vs foreach optimizer, accumulation
// (half the micro-batch, twice the accumulation), activation checkpointing, cuDNN benchmark and CUDA graphs where
// they apply. Trials (app/trial.h) are interleaved: each round runs the baseline and every row in an order rotated
// by one, so drift of the machine spreads over all of them; the report gives medians and the spread (min-max) of
// samples/s and peak memory, and their ratios to the baseline's medians. Output: a table, JSON, and a bar chart as
// SVG and PNG (obs/bar_chart.h).
#pragma once

#include <atomic>
#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "bellows/lab/trial.h"      // defines: Trial
#include "bellows/config/config.h"  // defines: Config
#include "bellows/obs/bar_chart.h"  // defines: BarChart

namespace bellows::lab {

struct MatrixOptions {
  int rounds = 3;              // trials of each row (and of the baseline)
  double trial_seconds = 3;    // training per trial (at least 5 optimizer steps)
  std::FILE* progress = stderr;
  const std::atomic<bool>* stop_flag = nullptr;
};

struct MatrixRow {
  std::string id;                      // precision | workers | prefetch | channels_last | optimizer | accumulation | checkpointing | cudnn_benchmark | cuda_graphs
  std::string label;                   // what the row runs: "precision=bf16-mixed"
  std::vector<std::string> overrides;  // on top of the baseline
  std::string expected;                // what the seeds say to expect
  std::string skipped;                 // why the row was not measured; "" measured
  std::vector<Trial> trials;           // one per round
  double median_samples_per_s = 0, min_samples_per_s = 0, max_samples_per_s = 0;
  double median_peak_mb = -1;          // tensor memory peak (the process's resident peak where not counted)
  double speedup = 0;                  // median samples/s over the baseline's median; 0: not measured
  double memory_ratio = 0;             // median peak over the baseline's; 0: not measured
  std::string error;                   // a trial that failed: its error
};

struct MatrixReport {
  std::string config_name, machine;
  int rounds = 0;
  double trial_seconds = 0, seconds = 0;
  MatrixRow baseline;
  std::vector<MatrixRow> rows;

  std::string table() const;
  nlohmann::json to_json() const;
  obs::BarChart chart() const;
};

// kConfig errors of the config propagate (as `bellows train` would fail); a row whose trials fail is reported.
MatrixReport bench_matrix(const config::Config& config, const MatrixOptions& options = {});

}  // namespace bellows::lab
