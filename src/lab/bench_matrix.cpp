// The optimization matrix; see bench_matrix.h.
#include "bellows/app/run_settings.h"
#include "bellows/app/trainer_setup.h"
#include "bellows/data/build.h"
#include "bellows/lab/bench_matrix.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <chrono>
#include <cmath>

#include "bellows/app/data_setup.h"
#include "bellows/app/run.h"
#include "bellows/hw/recommendation.h"  // defines: device_facts
#include "bellows/precision/registry.h"
#include "bellows/lab/tune.h"
#include "bellows/config/schema.h"
#include "bellows/hw/hardware_info.h"
#include "bellows/models/registry.h"
#include "bellows/plan/plan.h"
#include "bellows/util/check.h"

namespace bellows::lab {

namespace matrix_impl {  // named, not anonymous: the unity build compiles this file with the other app sources

// A row of the matrix; `skipped` says why it is not measured ("" measured).
void add_matrix_row(std::vector<MatrixRow>& rows, std::string id, std::string label, std::vector<std::string> overrides,
                    std::string expected, std::string skipped = "") {
  MatrixRow r;
  r.id = std::move(id);
  r.label = std::move(label);
  r.overrides = std::move(overrides);
  r.expected = std::move(expected);
  r.skipped = std::move(skipped);
  rows.push_back(std::move(r));
}

// Precision: mixed precision on where the baseline is full precision, off where it is mixed (the registry's most
// exact policy); where `auto` picks no mixed policy here, the one it would prefer is listed unmeasured with its caveat.
void add_precision_row(std::vector<MatrixRow>& rows, const config::Config& c, const hw::HardwareInfo& hw, const plan::Plan& p) {
  const std::string auto_pick = app::plan_with_auto_precision(c, hw).precision;
  const std::vector<precision::PrecisionEntry> policies = precision::precision_entries();  // most exact first
  const std::string expected = "mixed precision (AMP): ~2x, ~50% less memory";
  if (precision::find_precision(p.precision).mixed()) {
    const std::string exact = "precision=" + policies.front().name;
    add_matrix_row(rows, "precision", exact, {exact}, expected);
  } else if (auto_pick != p.precision) {
    add_matrix_row(rows, "precision", "precision=" + auto_pick, {"precision=" + auto_pick}, expected);
  } else {
    const precision::PrecisionEntry* preferred = nullptr;  // the mixed policy `auto` prefers where it can
    for (const auto& e : policies) {
      if (e.mixed() && (preferred == nullptr || e.auto_preference > preferred->auto_preference)) preferred = &e;
    }
    if (preferred != nullptr) {
      const precision::DeviceFacts device = p.device.is_cpu() ? hw::device_facts(hw.cpu) : hw::device_facts(hw.cuda.gpus.at(static_cast<std::size_t>(std::max<int>(0, p.device.index()))));
      const std::string caveat = preferred->caveat ? preferred->caveat(device) : std::string();
      add_matrix_row(rows, "precision", "precision=" + preferred->name, {}, expected,
                     "not measured: " + (caveat.empty() ? std::string("precision: auto does not pick it here") : caveat));
    }
  }
}

// The loader: workers (prefetching in threads) and the depth of its queue.
void add_loader_rows(std::vector<MatrixRow>& rows, const config::Config& c, const plan::Plan& p) {
  const std::int64_t prefetch = app::loader_settings(c).loader.prefetch;
  if (data::data_options(c).source == "stream") {
    add_matrix_row(rows, "workers", "data.workers", {}, "prefetching loader: 20-40%", "not measured: data.source: stream (the program pushes the samples)");
    add_matrix_row(rows, "prefetch", "data.prefetch", {}, "deeper prefetch queue", "not measured: data.source: stream");
  } else if (p.workers > 0) {
    add_matrix_row(rows, "workers", "data.workers=0 (no prefetching)", {"data.workers=0"}, "prefetching loader: 20-40%");
    add_matrix_row(rows, "prefetch", fmt::format("data.prefetch={}", 2 * prefetch), {fmt::format("data.prefetch={}", 2 * prefetch)}, "deeper prefetch queue");
  } else {
    add_matrix_row(rows, "workers", "data.workers=1 (prefetching)", {"data.workers=1", fmt::format("data.prefetch={}", std::max<std::int64_t>(2, prefetch))},
                   "prefetching loader: 20-40%");
    add_matrix_row(rows, "prefetch", fmt::format("data.workers=1 data.prefetch={}", 2 * std::max<std::int64_t>(2, prefetch)),
                   {"data.workers=1", fmt::format("data.prefetch={}", 2 * std::max<std::int64_t>(2, prefetch))}, "deeper prefetch queue");
  }
}

// Memory format (models with 2-D convolutions), then the optimizer's kernels.
void add_layout_and_optimizer_rows(std::vector<MatrixRow>& rows, const config::Config& c, const models::ModelEntry& model, bool convolutional) {
  const bool cl = app::plan_request(c).channels_last;
  if (convolutional) add_matrix_row(rows, "channels_last", fmt::format("channels_last={}", !cl), {fmt::format("channels_last={}", !cl)}, "NHWC convolutions: faster on tensor cores and oneDNN");
  else add_matrix_row(rows, "channels_last", "channels_last=true", {}, "NHWC convolutions", fmt::format("not applicable: model {} has no 2-D convolutions (channels_last lays out their 4-D tensors)", model.name));
  const bool foreach = app::trainer_settings(c).optimizer.implementation == "foreach";
  add_matrix_row(rows, "optimizer", foreach ? "optim.implementation=fused" : "optim.implementation=foreach", {foreach ? "optim.implementation=fused" : "optim.implementation=foreach"},
                 "fused optimizer: fewer kernel launches than foreach");
}

// Accumulation: the same samples per optimizer step in twice as many micro-batches.
void add_accumulation_row(std::vector<MatrixRow>& rows, const config::Config& c) {
  const app::LoaderSettings loader = app::loader_settings(c);
  if (loader.batch_auto) {
    add_matrix_row(rows, "accumulation", "accumulation x2", {}, "accumulation: same samples per step, smaller micro-batches", "not measured: data.batch_size is auto (the finder chooses the split)");
    return;
  }
  const std::int64_t b = loader.batch_size, a = app::trainer_settings(c).accumulation_steps;
  if (b >= 2 && b % 2 == 0) {
    add_matrix_row(rows, "accumulation", fmt::format("data.batch_size={} train.accumulation_steps={}", b / 2, 2 * a),
                   {fmt::format("data.batch_size={}", b / 2), fmt::format("train.accumulation_steps={}", 2 * a)}, "accumulation: same samples per step, smaller micro-batches");
  } else {
    add_matrix_row(rows, "accumulation", "accumulation x2", {}, "accumulation", fmt::format("not measured: data.batch_size {} is not even", b));
  }
}

// Activation checkpointing of every block (a model without blocks: its trial's refusal makes the row not applicable).
void add_checkpointing_row(std::vector<MatrixRow>& rows, const config::Config& c) {
  if (app::run_settings(c).checkpointing.empty()) {
    add_matrix_row(rows, "checkpointing", "checkpointing=[*]", {"checkpointing=['*']"}, "activation checkpointing: ~50% less memory, ~30% slower");
  } else {
    add_matrix_row(rows, "checkpointing", "checkpointing=[]", {"checkpointing=[]"}, "activation checkpointing: ~50% less memory, ~30% slower");
  }
}

// CUDA only: cuDNN's algorithm search (models with 2-D convolutions) and whole steps as CUDA graphs.
void add_cuda_rows(std::vector<MatrixRow>& rows, const config::Config& c, const plan::Plan& p, const models::ModelEntry& model, bool convolutional) {
  if (p.device.is_cpu()) {
    add_matrix_row(rows, "cudnn_benchmark", "cudnn_benchmark", {}, "cuDNN benchmark: 10-30% (convolutions)", "not applicable: CUDA only");
    add_matrix_row(rows, "cuda_graphs", "CUDA graphs", {}, "CUDA graphs: less launch overhead", "not applicable: CUDA only");
    return;
  }
  if (convolutional) {
    add_matrix_row(rows, "cudnn_benchmark", fmt::format("cudnn_benchmark={}", !p.cudnn_benchmark), {fmt::format("cudnn_benchmark={}", !p.cudnn_benchmark)},
                   "cuDNN benchmark: 10-30% (convolutions)");
  } else {
    add_matrix_row(rows, "cudnn_benchmark", "cudnn_benchmark", {}, "cuDNN benchmark: 10-30% (convolutions)", fmt::format("not measured: model {} has no 2-D convolutions (the matrix tries cuDNN's search with those)", model.name));
  }
  const std::string other = app::run_settings(c).compile == "off" ? "compile=cuda_graph" : "compile=off";
  add_matrix_row(rows, "cuda_graphs", other, {other}, "CUDA graphs: less launch overhead");
}

// The rows for this config on this machine: each one optimization switched relative to the configured run.
std::vector<MatrixRow> matrix_rows(const config::Config& c, const hw::HardwareInfo& hw) {
  const plan::Plan p = plan::resolve(app::plan_request(c), hw);
  const models::ModelEntry& model = models::find_model(app::run_settings(c).model_name);
  const bool convolutional = models::is_convolutional(model, c);
  std::vector<MatrixRow> rows;
  add_precision_row(rows, c, hw, p);
  add_loader_rows(rows, c, p);
  add_layout_and_optimizer_rows(rows, c, model, convolutional);
  add_accumulation_row(rows, c);
  add_checkpointing_row(rows, c);
  add_cuda_rows(rows, c, p, model, convolutional);
  return rows;
}

void summarise_row(MatrixRow& r) {
  std::vector<double> sps, peak;
  for (const auto& t : r.trials) {
    if (!t.measured()) continue;
    sps.push_back(t.samples_per_s);
    if (t.peak_mb() >= 0) peak.push_back(t.peak_mb());
  }
  if (sps.empty()) return;
  r.median_samples_per_s = quantile(sps, 0.5);
  r.min_samples_per_s = *std::min_element(sps.begin(), sps.end());
  r.max_samples_per_s = *std::max_element(sps.begin(), sps.end());
  r.median_peak_mb = peak.empty() ? -1 : quantile(peak, 0.5);
}

nlohmann::json row_json(const MatrixRow& r) {
  nlohmann::json j = {{"id", r.id}, {"label", r.label}, {"overrides", r.overrides}, {"expected", r.expected}};
  if (!r.skipped.empty()) {
    j["skipped"] = r.skipped;
    return j;
  }
  if (!r.error.empty()) j["error"] = r.error;
  j["samples_per_s"] = {{"median", r.median_samples_per_s}, {"min", r.min_samples_per_s}, {"max", r.max_samples_per_s}};
  j["peak_mb"] = r.median_peak_mb;
  j["speedup"] = r.speedup;
  j["memory_ratio"] = r.memory_ratio;
  j["trials"] = nlohmann::json::array();
  for (const auto& t : r.trials) {
    nlohmann::json tj = {{"samples_per_s", t.samples_per_s}, {"step_ms", t.step_ms}, {"steps", t.steps}, {"peak_mb", t.peak_mb()}, {"seconds", t.seconds}};
    if (!t.error.empty()) tj["error"] = t.error;
    j["trials"].push_back(tj);
  }
  return j;
}

}  // namespace matrix_impl

using namespace matrix_impl;

namespace matrix_impl {

// Interleaved rounds of a trial per measured row, the baseline among them.
void run_matrix_rounds(TrialRunner& runner, MatrixReport& report, const MatrixOptions& options) {
  std::vector<MatrixRow*> order{&report.baseline};
  for (auto& r : report.rows) {
    if (r.skipped.empty()) order.push_back(&r);
  }
  for (int round = 0; round < options.rounds && !runner.stopped(); ++round) {
    // Rotated by one each round: the baseline first in the first round, last-but-round in the others.
    for (std::size_t k = 0; k < order.size() && !runner.stopped(); ++k) {
      MatrixRow& r = *order[(k + static_cast<std::size_t>(round)) % order.size()];
      if (!r.error.empty() || !r.skipped.empty()) continue;  // failed or found not applicable in an earlier round: not again
      Trial t = runner.run(fmt::format("{} (round {})", r.label, round + 1), r.overrides, options.trial_seconds, 5, /*baseline=*/&r == &report.baseline);
      if (!t.measured()) {
        // A model that cannot take the setting (no blocks to checkpoint: models/activation_checkpoint.h's refusal,
        // which starts "checkpointing: ") is a row that does not apply, like channels_last without 2-D convolutions.
        if (r.id == "checkpointing" && t.error.rfind("checkpointing: ", 0) == 0) {
          r.skipped = "not applicable: " + t.error.substr(std::string("checkpointing: ").size());
          r.trials.clear();
          continue;
        }
        r.error = t.error.empty() ? "fewer than 3 steps in the trial" : t.error;
      }
      r.trials.push_back(std::move(t));
    }
  }
}

// Each measured row's medians, and its speed and memory as ratios to the baseline's.
void summarise_matrix(MatrixReport& report) {
  summarise_row(report.baseline);
  for (auto& r : report.rows) {
    if (!r.skipped.empty()) continue;
    if (!r.error.empty()) {  // failed
      r.trials.clear();
      continue;
    }
    summarise_row(r);
    if (report.baseline.median_samples_per_s > 0 && r.median_samples_per_s > 0) r.speedup = r.median_samples_per_s / report.baseline.median_samples_per_s;
    if (report.baseline.median_peak_mb > 0 && r.median_peak_mb > 0) r.memory_ratio = r.median_peak_mb / report.baseline.median_peak_mb;
  }
}

}  // namespace matrix_impl

MatrixReport bench_matrix(const config::Config& c, const MatrixOptions& options) {
  BELLOWS_CHECK_CONFIG(options.rounds >= 1, fmt::format("--rounds {} : expected at least 1", options.rounds), "e.g. --rounds 3");
  BELLOWS_CHECK_CONFIG(options.trial_seconds > 0 && std::isfinite(options.trial_seconds),
                       fmt::format("--trial-seconds {}: expected > 0", options.trial_seconds), "e.g. --trial-seconds 3");
  const auto start = std::chrono::steady_clock::now();
  const hw::HardwareInfo& hw = hw::HardwareInfo::get();
  MatrixReport report;
  report.config_name = app::run_settings(c).name;
  report.machine = app::machine_line(hw);
  report.rounds = options.rounds;
  report.trial_seconds = options.trial_seconds;
  report.baseline = {"baseline", "as configured", {}, "", "", {}, 0, 0, 0, -1, 1, 1, ""};
  report.rows = matrix_rows(c, hw);

  TrialRunner runner(c, "bench", options.progress, options.stop_flag);
  run_matrix_rounds(runner, report, options);
  BELLOWS_CHECK_RESOURCE(report.baseline.error.empty() || runner.stopped(),
                         fmt::format("the configured run failed in its trial: {}", report.baseline.error), "run bellows train with this config to see why");
  summarise_matrix(report);
  report.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return report;
}

std::string MatrixReport::table() const {
  std::string out = fmt::format("bellows bench --matrix: {} on {}\n{} round(s) of interleaved trials, {:.1f} s of training each; {:.0f} s in all\n",
                                config_name, machine, rounds, trial_seconds, seconds);
  std::size_t width = baseline.label.size();
  for (const auto& r : rows) width = std::max(width, r.label.size());
  width = std::min<std::size_t>(width, 48);
  out += fmt::format("  {:<{}}  {:>11} {:>19} {:>7} {:>9} {:>7}  {}\n", "setting", width, "samples/s", "min-max", "speed", "peak MB", "memory", "the seeds expect");
  auto line = [&](const MatrixRow& r) {
    const std::string label = r.label.size() > width ? r.label.substr(0, width - 3) + "..." : r.label;
    if (!r.skipped.empty()) return fmt::format("  {:<{}}  {}  ({})\n", label, width, r.skipped, r.expected);
    if (!r.error.empty()) return fmt::format("  {:<{}}  failed: {}  ({})\n", label, width, r.error, r.expected);
    return fmt::format("  {:<{}}  {:>11} {:>19} {:>7} {:>9} {:>7}  {}\n", label, width, format_rate(r.median_samples_per_s),
                       format_rate(r.min_samples_per_s) + "-" + format_rate(r.max_samples_per_s), fmt::format("{:.2f}x", r.speedup),
                       r.median_peak_mb >= 0 ? fmt::format("{:.0f}", r.median_peak_mb) : "-",
                       r.memory_ratio > 0 ? fmt::format("{:.2f}x", r.memory_ratio) : "-", r.expected);
  };
  out += line(baseline);
  for (const auto& r : rows) out += line(r);
  out += "speed and memory: median over the rounds, as a ratio to the baseline's median; peak MB: tensor memory\n";
  return out;
}

nlohmann::json MatrixReport::to_json() const {
  nlohmann::json j = {{"config", config_name}, {"machine", machine}, {"rounds", rounds}, {"trial_seconds", trial_seconds},
                      {"seconds", seconds}, {"baseline", row_json(baseline)}};
  j["rows"] = nlohmann::json::array();
  for (const auto& r : rows) j["rows"].push_back(row_json(r));
  return j;
}

obs::BarChart MatrixReport::chart() const {
  obs::BarChart chart;
  chart.title = fmt::format("bellows bench --matrix: {}", config_name);
  chart.subtitle = fmt::format("{}; baseline {} samples/s; median of {} rounds, whiskers min-max", machine,
                               format_rate(baseline.median_samples_per_s), rounds);
  chart.panels = {{"samples/s vs the baseline", 1.0}, {"peak tensor memory vs the baseline", 1.0}};
  for (const auto& r : rows) {
    obs::BarChartRow row;
    row.label = r.label.size() > 46 ? r.label.substr(0, 43) + "..." : r.label;
    if (r.speedup > 0) {
      const double base = baseline.median_samples_per_s;
      row.values = {r.speedup, r.memory_ratio > 0 ? r.memory_ratio : -1};
      row.lows = {r.min_samples_per_s / base, -1};
      row.highs = {r.max_samples_per_s / base, -1};
      row.notes = {fmt::format("{:.2f}x", r.speedup), r.memory_ratio > 0 ? fmt::format("{:.2f}x", r.memory_ratio) : "-"};
    } else {
      const std::string why = !r.skipped.empty() ? r.skipped : "failed";
      const std::string short_why = why.substr(0, why.find(':'));
      row.values = {-1, -1};
      row.notes = {short_why, ""};
    }
    chart.rows.push_back(std::move(row));
  }
  return chart;
}

}  // namespace bellows::lab
