// Measured trials of a configured run: the configured run with some settings changed, trained for a few seconds
// in a temporary directory (no checkpoints, TensorBoard or evaluation, a record every step), summarised as the
// median step time, samples/s, the step's phases and the memory peaks. `bellows doctor`, the autotuner
// (`bellows plan`, app/tune.h) and the optimization matrix (`bellows bench --matrix`, app/bench_matrix.h) all
// measure through it, so their numbers mean the same thing.
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <string>
#include <utility>
#include <vector>

#include "bellows/config/config.h"  // defines: Config

namespace bellows::lab {

// One measured trial: a config with `overrides` on top.
struct Trial {
  std::string name;                    // "baseline", "precision=bf16-mixed", ...
  std::vector<std::string> overrides;  // key=value
  std::string error;                   // what ended it early (a detect_anomaly finding, out of memory); "" none
  double seconds = 0;                  // wall time of the trial, setup included
  double fit_seconds = 0;              // of it, training
  std::int64_t steps = 0;              // optimizer steps trained
  std::int64_t batch_size = 0;         // data.batch_size x accumulation steps: samples per optimizer step
  std::string device, precision;       // as planned
  std::int64_t threads = 0, workers = 0, prefetch = 0;
  double first_step_ms = 0;            // the first optimizer step (warm-up)
  double step_ms = 0;                  // median over the steady steps (the third on)
  double step_spread = 0;              // (p90 - p10) / median of those steps
  double samples_per_s = 0;            // samples per step / median step time
  std::array<double, 6> phase_ms{};    // mean per steady step: data, copy, forward, backward, optimizer, other
  double mem_peak_mb = -1;             // tensor memory, largest window peak; -1 not counted
  double rss_peak_mb = -1;             // process resident memory, peak
  // Tensor memory held by category at the last record (between steps): weights, gradients (buffers), optimizer
  // state, EMA; -1 not counted.
  std::array<double, 4> held_mb{-1, -1, -1, -1};
  double mfu = -1, gflops = -1;        // medians; -1 not measured
  std::int64_t skipped_steps = 0;
  double loss_scale = 0;               // last (fp16-mixed)
  std::vector<std::pair<std::int64_t, double>> losses;  // (step, training loss)
  double fetch_ms_per_batch = 0;       // the loader's stage times per batch (read + decode + transform + collate)
  std::string slowest_stage;           // of those stages
  std::string first_nonfinite;         // the trainer's note of the first skipped step (step, parameter); "" none
  bool stopped_early = false;          // a clear loser: stopped below its stop_below_samples_per_s

  bool measured() const { return error.empty() && steps >= 3 && samples_per_s > 0; }
  double peak_mb() const { return mem_peak_mb >= 0 ? mem_peak_mb : rss_peak_mb; }  // tensor memory, else the process's
};

double step_total(const Trial& t);     // sum of the phase means, ms
double data_fraction(const Trial& t);  // share of the step spent waiting for data
// A throughput as people read it: whole samples/s from 1,000 on (131600, not 1.316e+05), 4 digits below.
std::string format_rate(double per_s);
// Linear-interpolated quantile (q in [0, 1]) of `v`; 0 for none.
double quantile(std::vector<double> v, double q);

// Runs trials of one base config, each in its own directory under a temporary one that the runner removes.
class TrialRunner {
 public:
  // `tag` names the temporary directory and starts the progress lines ("doctor", "plan", "bench").
  TrialRunner(config::Config base, std::string tag, std::FILE* progress = stderr, const std::atomic<bool>* stop_flag = nullptr);
  ~TrialRunner();
  TrialRunner(const TrialRunner&) = delete;
  TrialRunner& operator=(const TrialRunner&) = delete;

  // Trains the base config with `overrides` for `seconds` of training after its setup, at least `min_steps`
  // optimizer steps (at most 3 x `seconds`), then summarises it. A bad override is a kConfig error (the caller's).
  // The `baseline` (the configured run itself) fails as `bellows train` would: whatever ends it (a data path that is a
  // directory, out of memory, a LibTorch error) is rethrown as it is, so the tool ends with that run's error, exit
  // code and hint. What ends another trial (out of memory with a larger batch, a detect_anomaly finding) is its `error`.
  // With `stop_below_samples_per_s` > 0 the trial also stops, as a clear loser, once the median of its steady steps
  // (two at least, after the first two) is below that.
  Trial run(const std::string& name, const std::vector<std::string>& overrides, double seconds, std::int64_t min_steps = 5,
            bool baseline = false, double stop_below_samples_per_s = 0);

  const config::Config& base() const { return base_; }
  bool stopped() const { return stop_flag_ != nullptr && stop_flag_->load(); }

 private:
  config::Config base_;
  std::string tag_;
  std::FILE* progress_;
  const std::atomic<bool>* stop_flag_;
  std::filesystem::path dir_;
  int next_index_ = 0;
};

}  // namespace bellows::lab
