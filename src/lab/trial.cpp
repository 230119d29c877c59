// Measured trials of a configured run; see trial.h.
#include "bellows/app/trainer_setup.h"
#include "bellows/lab/trial.h"

#include <c10/util/Exception.h>
#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <fstream>
#include <memory>
#include <new>

#include <nlohmann/json.hpp>

#include "bellows/app/data_setup.h"
#include "bellows/app/run.h"
#include "bellows/app/schema.h"
#include "bellows/obs/memory.h"
#include "bellows/obs/phase_clock.h"
#include "bellows/obs/sink.h"
#include "bellows/util/check.h"

namespace bellows::lab {
namespace fs = std::filesystem;

namespace trial_impl {  // named, not anonymous: the unity build compiles this file with the other app sources

using Clock = std::chrono::steady_clock;
double trial_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

// Collects a trial's records (one per optimizer step) and ends the trial by its stop flag once it has run its
// time and at least min_steps steps, or three times its time, or when the caller stops everything.
class TrialSink final : public obs::Sink {
 public:
  TrialSink(double fit_seconds, std::int64_t min_steps, const std::atomic<bool>* outer, double stop_below)
      : fit_seconds_(fit_seconds), min_steps_(min_steps), outer_(outer), stop_below_(stop_below) {}
  void on_step(const obs::StepRecord& r) override {
    records.push_back(r);
    const bool enough = r.elapsed_s >= fit_seconds_ && static_cast<std::int64_t>(records.size()) >= min_steps_;
    if (stop_below_ > 0 && records.size() >= 4) {  // the steady steps: the third on (as summarise counts them)
      std::vector<double> sps;
      for (std::size_t i = 2; i < records.size(); ++i) sps.push_back(records[i].samples_per_s);
      if (quantile(sps, 0.5) < stop_below_) loser = true;
    }
    if (enough || loser || r.elapsed_s >= 3 * fit_seconds_ || (outer_ != nullptr && outer_->load())) stop.store(true);
  }
  void on_message(const std::string& text) override { messages.push_back(text); }
  std::atomic<bool> stop{false};
  bool loser = false;
  std::vector<obs::StepRecord> records;
  std::vector<std::string> messages;

 private:
  double fit_seconds_;
  std::int64_t min_steps_;
  const std::atomic<bool>* outer_;
  double stop_below_;
};

double value_of(const obs::StepRecord& r, const std::string& key, double fallback = -1) {
  for (const auto& [k, v] : r.values) {
    if (k == key) return v;
  }
  return fallback;
}

// Per-trial settings that keep the measurement clean: a temporary run directory, no checkpoints, TensorBoard,
// trace or evaluation, a record per step, enough epochs that the time ends the trial, and non-finite steps
// skipped rather than ending the trial.
std::vector<std::string> trial_settings(const fs::path& dir, int index) {
  return {"output_dir=" + dir.string(), fmt::format("name=trial-{}", index), "resume=''", "checkpoint.enabled=false",
          "log.tensorboard=false", "profile.enabled=false", "profile.window=''", "train.log_every_n_steps=1",
          "train.eval_every_n_steps=1000000000", "train.epochs=100000", "train.max_steps=0",
          "train.on_nonfinite=skip"};  // measured on past a non-finite step; the doctor's nonfinite finding says where it was
}

// Summarises a trial's records: the first step apart, medians over the steady steps (the third on: the second
// counts its FLOPs under the profiler), phase means.
void summarise(Trial& t, const std::vector<obs::StepRecord>& records) {
  t.steps = records.empty() ? 0 : records.back().step - records.front().step + 1;
  if (records.empty()) return;
  t.first_step_ms = records.front().step_time_ms;
  const std::size_t skip = records.size() >= 5 ? 2 : (records.size() >= 2 ? 1 : 0);
  std::vector<double> step_ms, sps, mfu, gflops;
  t.phase_ms.fill(0);
  for (std::size_t i = skip; i < records.size(); ++i) {
    const obs::StepRecord& r = records[i];
    step_ms.push_back(r.step_time_ms);
    sps.push_back(r.samples_per_s);
    if (const double m = value_of(r, "mfu"); m >= 0) mfu.push_back(m);
    if (const double g = value_of(r, "gflops"); g >= 0) gflops.push_back(g);
    for (std::size_t p = 0; p < r.phase_ms.size() && p < t.phase_ms.size(); ++p) t.phase_ms[p] += r.phase_ms[p].second;
  }
  const auto n = static_cast<double>(records.size() - skip);
  for (double& ms : t.phase_ms) ms /= n;
  t.step_ms = quantile(step_ms, 0.5);
  t.step_spread = t.step_ms > 0 ? (quantile(step_ms, 0.9) - quantile(step_ms, 0.1)) / t.step_ms : 0;
  t.samples_per_s = quantile(sps, 0.5);
  t.mfu = mfu.empty() ? -1 : quantile(mfu, 0.5);
  t.gflops = gflops.empty() ? -1 : quantile(gflops, 0.5);
  const char* held[] = {"mem_weights_mb", "mem_grads_mb", "mem_optim_mb", "mem_ema_mb"};
  for (std::size_t k = 0; k < t.held_mb.size(); ++k) t.held_mb[k] = value_of(records.back(), held[k]);
  for (const auto& r : records) {
    t.losses.emplace_back(r.step, value_of(r, "loss", NAN));
    t.mem_peak_mb = std::max(t.mem_peak_mb, value_of(r, "mem_peak_mb"));
    t.rss_peak_mb = std::max(t.rss_peak_mb, value_of(r, "rss_peak_mb"));
    t.loss_scale = value_of(r, "loss_scale", t.loss_scale);
  }
}

}  // namespace trial_impl

using namespace trial_impl;

double step_total(const Trial& t) {
  double total = 0;
  for (double ms : t.phase_ms) total += ms;
  return total;
}

double data_fraction(const Trial& t) {
  const double total = step_total(t);
  return total > 0 ? t.phase_ms[static_cast<std::size_t>(obs::Phase::kData)] / total : 0;
}

std::string format_rate(double per_s) { return per_s >= 1000 ? fmt::format("{:.0f}", per_s) : fmt::format("{:.4g}", per_s); }

double quantile(std::vector<double> v, double q) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const double pos = q * static_cast<double>(v.size() - 1);
  const auto lo = static_cast<std::size_t>(std::floor(pos));
  const auto hi = std::min(lo + 1, v.size() - 1);
  return v[lo] + (pos - static_cast<double>(lo)) * (v[hi] - v[lo]);
}

TrialRunner::TrialRunner(config::Config base, std::string tag, std::FILE* progress, const std::atomic<bool>* stop_flag)
    : base_(std::move(base)), tag_(std::move(tag)), progress_(progress), stop_flag_(stop_flag) {
  static std::atomic<int> calls{0};
  dir_ = fs::temp_directory_path() / fmt::format("bellows-{}-{}-{}", tag_, ::getpid(), calls++);
  fs::create_directories(dir_);
  obs::install_cpu_tracking();  // tensor memory counted in every trial (run() installs it too; before the first setup)
}

TrialRunner::~TrialRunner() {
  std::error_code ec;
  fs::remove_all(dir_, ec);
}

Trial TrialRunner::run(const std::string& name, const std::vector<std::string>& overrides, double seconds, std::int64_t min_steps,
                       bool baseline, double stop_below_samples_per_s) {
  Trial t;
  t.name = name;
  t.overrides = overrides;
  if (progress_) {
    fmt::print(progress_, "{}: trial '{}' ({:.1f} s)\n", tag_, name, seconds);
    std::fflush(progress_);
  }
  const int index = next_index_++;
  std::vector<std::string> args = trial_settings(dir_, index);
  args.insert(args.end(), overrides.begin(), overrides.end());
  const config::Config c = app::resolve_loaded_config(base_, args);  // a bad override is the caller's kConfig error
  t.batch_size = app::loaded_batch_size(c) * app::trainer_settings(c).accumulation_steps;
  // The setup (data, model) runs before the clock of the trial's training starts: the training gets `seconds`.
  auto sink = std::make_shared<TrialSink>(seconds, min_steps, stop_flag_, stop_below_samples_per_s);
  app::RunOptions ro;
  ro.console = nullptr;
  ro.stop_flag = &sink->stop;
  ro.sinks = {sink};
  const Clock::time_point t0 = Clock::now();
  fs::path run_dir = dir_ / fmt::format("trial-{}", index);
  try {
    const app::RunResult r = app::run(c, ro);
    run_dir = r.run_dir;
    t.fit_seconds = r.fit.seconds;
    t.skipped_steps = r.fit.skipped_steps;
    const data::LoaderStats& d = r.data;
    t.workers = d.workers;
    t.prefetch = d.prefetch;
    if (d.batches > 0) {
      const data::StageTimes& s = d.stages;
      t.fetch_ms_per_batch = 1e3 * (s.read + s.decode + s.transform + s.collate) / static_cast<double>(d.batches);
      const std::vector<std::pair<std::string, double>> stages{{"read", s.read}, {"decode", s.decode}, {"transform", s.transform}, {"collate", s.collate}};
      t.slowest_stage = std::max_element(stages.begin(), stages.end(), [](const auto& a, const auto& b) { return a.second < b.second; })->first;
    }
  } catch (const Error& e) {
    // The configured run's failure (a data path that is a directory, a bad value, out of memory in its first step) is
    // the caller's: the tool ends with that run's error, as `bellows train` would. An experiment's failure (a model
    // without blocks to checkpoint, a larger batch out of memory) is the trial's.
    if (baseline) throw;
    t.error = e.message();
  } catch (const c10::Error& e) {  // out of memory and other LibTorch failures inside the step
    if (baseline) throw;
    t.error = e.what_without_backtrace();
  } catch (const std::bad_alloc&) {
    if (baseline) throw;
    t.error = "out of memory (std::bad_alloc)";
  }
  t.seconds = trial_since(t0);
  summarise(t, sink->records);
  t.stopped_early = sink->loser;
  for (const auto& m : sink->messages) {
    if (m.find("skipped: non-finite gradients") != std::string::npos) {
      t.first_nonfinite = m;
      break;
    }
  }
  std::ifstream plan_file(run_dir / "plan.json");
  if (plan_file) {
    const nlohmann::json plan = nlohmann::json::parse(plan_file, nullptr, /*allow_exceptions=*/false);
    if (plan.is_object()) {
      t.device = plan.value("device", "");
      t.precision = plan.value("precision", "");
      t.threads = plan.value("threads", 0);
      if (t.workers == 0 && t.prefetch == 0) t.workers = plan.value("workers", 0);
    }
  }
  if (t.prefetch == 0) t.prefetch = app::loader_settings(c).loader.prefetch;
  if (progress_) {
    fmt::print(progress_, "{}:   {} steps, {:.3g} ms/step, {} samples/s{}\n", tag_, t.steps, t.step_ms, format_rate(t.samples_per_s),
               t.error.empty() ? "" : " (ended: " + t.error + ")");
    std::fflush(progress_);
  }
  // A trial's run directory is not kept: many trials of a large model would fill the temporary directory.
  std::error_code ec;
  fs::remove_all(run_dir, ec);
  return t;
}

}  // namespace bellows::lab
