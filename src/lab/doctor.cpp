// Measured trials and the diagnosis; see doctor.h. The findings drawn from the trials are in doctor_findings.cpp.
#include "bellows/app/run_settings.h"
#include "bellows/app/trainer_setup.h"
#include "bellows/lab/doctor.h"

#include <c10/util/Exception.h>
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <memory>
#include <new>

#include "bellows/app/data_setup.h"
#include "bellows/app/run.h"
#include "bellows/precision/registry.h"
#include "bellows/app/schema.h"
#include "bellows/hw/hardware_info.h"
#include "bellows/obs/memory.h"
#include "bellows/obs/phase_clock.h"
#include "bellows/obs/sink.h"
#include "bellows/plan/plan.h"
#include "bellows/util/check.h"
#include "lab/internal/doctor_diagnosis.h"  // defines: DoctorFacts, DoctorExperiments, doctor_findings

namespace bellows::lab {
namespace fs = std::filesystem;

namespace doctor_impl {  // named, not anonymous: the unity build compiles this file with the other app sources

using Clock = std::chrono::steady_clock;
double since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

std::string phases_line(const DoctorTrial& t) {
  const double total = step_total(t);
  std::string out;
  for (std::size_t i = 0; i < t.phase_ms.size(); ++i) {
    out += fmt::format("{}{} {:.0f}%", out.empty() ? "" : " ", obs::phase_name(static_cast<obs::Phase>(i)), total > 0 ? 100 * t.phase_ms[i] / total : 0.0);
  }
  return out;
}

struct Experiment {
  std::string id;
  std::string name;
  std::vector<std::string> overrides;
};

// One line: CPU, cores, RAM and the first GPU.
std::string doctor_machine_line(const hw::HardwareInfo& hw) {
  return fmt::format("{}, {} usable cores, {:.1f} GiB RAM{}", hw.cpu.model_name, hw.cpu.usable_cpus, hw.memory.total_bytes / double(1LL << 30),
                     hw.cuda.usable && !hw.cuda.gpus.empty() ? fmt::format(", GPU {}", hw.cuda.gpus[0].name) : std::string());
}

// --- what the baseline says ---

// Non-finite values: a skipped step, or the first step whose training loss was not finite.
void read_nonfinite_facts(DoctorFacts& facts) {
  facts.nonfinite = facts.base.skipped_steps > 0;
  for (const auto& [step, loss] : facts.base.losses) {
    if (!std::isfinite(loss)) {
      facts.nonfinite = true;
      facts.first_bad_step = step;
      break;
    }
  }
}

// The precision the plan's `auto` picks here, when cheaper than the one running.
void read_precision_facts(const config::Config& base_config, DoctorFacts& facts) {
  facts.auto_plan = app::plan_with_auto_precision(base_config, facts.hw);
  for (const auto& e : facts.auto_plan.entries) {
    if (e.key == "precision") facts.auto_reason = e.reason;
  }
  facts.full_precision = !facts.base.precision.empty() && !precision::find_precision(facts.base.precision).mixed();
  // Or, where the run is in a reduced precision (auto's choice or the user's), fp32 against it: a change of numerics
  // is earned by speed, and fp32 was measured faster for a model on a CPU with bf16 units (issue 44).
  facts.other_precision = facts.full_precision ? facts.auto_plan.precision : "fp32";
}

// Memory: the budget a step may use, and the run's use against it.
void read_memory_facts(const config::Config& base_config, DoctorFacts& facts) {
  const hw::HardwareInfo& hw = facts.hw;
  facts.budget_gib = app::run_settings(base_config).memory_budget_gib;
  facts.on_cuda = facts.base.device.rfind("cuda", 0) == 0;
  if (facts.budget_gib > 0) facts.budget_mb = facts.budget_gib * double(1LL << 30) / 1e6;
  else if (facts.on_cuda && !hw.cuda.gpus.empty()) facts.budget_mb = hw.cuda.gpus[0].total_memory_bytes / 1e6;
  else facts.budget_mb = (hw.memory.available_bytes + std::max<std::int64_t>(0, obs::process_memory().rss_bytes)) / 1e6;
  facts.used_mb = facts.on_cuda || facts.budget_gib > 0 ? facts.base.mem_peak_mb : facts.base.rss_peak_mb;
  facts.memory_close = facts.budget_mb > 0 && facts.used_mb > kMemoryCloseFraction * facts.budget_mb;
}

DoctorFacts read_baseline_facts(const config::Config& base_config, const DoctorTrial& base, const hw::HardwareInfo& hw) {
  DoctorFacts facts{base, hw};
  facts.cores = std::max(1, hw.cpu.usable_cpus);
  read_nonfinite_facts(facts);
  facts.input_bound = data_fraction(base) > kInputBoundFraction;
  read_precision_facts(base_config, facts);
  facts.batch_auto = app::loader_settings(base_config).batch_auto;  // the finder chooses the micro-batch
  facts.batch = app::loaded_batch_size(base_config);
  facts.accumulation = app::trainer_settings(base_config).accumulation_steps;
  read_memory_facts(base_config, facts);
  return facts;
}

// --- which experiments the baseline calls for ---

// Workers that hide the fetch: a batch takes `fetch` ms to load and the step computes for `compute` ms.
Experiment input_experiment(const DoctorFacts& facts) {
  const DoctorTrial& base = facts.base;
  const double compute_ms = step_total(base) - base.phase_ms[kData];
  const double fetch = base.workers == 0 ? base.phase_ms[kData] : std::max(base.fetch_ms_per_batch, base.phase_ms[kData]);
  const auto needed = static_cast<std::int64_t>(std::ceil(1.25 * fetch / std::max(compute_ms, 0.05)));
  const std::int64_t want_workers = std::clamp<std::int64_t>(std::max(needed, base.workers + 1), base.workers + 1, std::max<std::int64_t>(4, 2 * facts.cores));
  const std::int64_t want_prefetch = std::max<std::int64_t>(base.prefetch, 2 * want_workers);
  return {"input", fmt::format("data.workers={} data.prefetch={}", want_workers, want_prefetch),
          {fmt::format("data.workers={}", want_workers), fmt::format("data.prefetch={}", want_prefetch)}};
}

// The cheaper precision auto picks against full precision; fp32 against a reduced one.
void add_precision_experiment(std::vector<Experiment>& experiments, const DoctorFacts& facts) {
  const std::string& running = facts.base.precision;
  const std::string& auto_precision = facts.auto_plan.precision;
  if (facts.full_precision && auto_precision != running && precision::find_precision(auto_precision).mixed()) {
    experiments.push_back({"precision", "precision=" + auto_precision, {"precision=" + auto_precision}});
  } else if (!running.empty() && !facts.full_precision) {
    experiments.push_back({"precision", "precision=fp32", {"precision=fp32"}});
  }
}

// Twice the batch, with half the accumulation when accumulating (the effective batch kept).
void add_overhead_experiment(std::vector<Experiment>& experiments, const DoctorFacts& facts) {
  const std::int64_t batch = facts.batch, accumulation = facts.accumulation;
  if (facts.batch_auto) {
    // no batch-size trial: the run's micro-batch is measured by the finder, its effective batch set by the user
  } else if (accumulation >= 2 && accumulation % 2 == 0) {
    experiments.push_back({"overhead", fmt::format("data.batch_size={} train.accumulation_steps={}", 2 * batch, accumulation / 2),
                           {fmt::format("data.batch_size={}", 2 * batch), fmt::format("train.accumulation_steps={}", accumulation / 2)}});
  } else {
    experiments.push_back({"overhead", fmt::format("data.batch_size={}", 2 * batch), {fmt::format("data.batch_size={}", 2 * batch)}});
  }
}

// On the CPU: compute threads that, with the loader workers, neither oversubscribe the cores nor leave some idle.
void add_threads_experiment(std::vector<Experiment>& experiments, const DoctorFacts& facts) {
  if (facts.base.device != "cpu" || facts.input_bound) return;
  const std::int64_t threads = facts.base.threads, workers = facts.base.workers, cores = facts.cores;
  std::int64_t other = 0;
  if (workers > 0 && threads + workers > cores && cores - workers >= 1) other = cores - workers;
  else if (threads + workers < cores) other = cores - workers;
  if (other > 0 && other != threads) experiments.push_back({"threads", fmt::format("threads={}", other), {fmt::format("threads={}", other)}});
}

std::vector<Experiment> doctor_experiments(const config::Config& base_config, const DoctorFacts& facts) {
  std::vector<Experiment> experiments;
  if (facts.nonfinite) experiments.push_back({"nonfinite", "train.detect_anomaly=true", {"train.detect_anomaly=true"}});
  if (facts.input_bound) experiments.push_back(input_experiment(facts));
  add_precision_experiment(experiments, facts);
  add_overhead_experiment(experiments, facts);
  add_threads_experiment(experiments, facts);
  if (facts.memory_close) experiments.push_back({"memory", "checkpointing=[*]", {"checkpointing=['*']"}});
  if (app::trainer_settings(base_config).optimizer.implementation == "foreach") {
    experiments.push_back({"fused", "optim.implementation=fused", {"optim.implementation=fused"}});
  }
  return experiments;
}

// --- the experiments, sharing what is left of the budget ---

DoctorExperiments run_doctor_experiments(TrialRunner& trials, const std::vector<Experiment>& experiments, const DoctorFacts& facts,
                                         const DoctorOptions& options, Clock::time_point start, DoctorReport& report) {
  const DoctorTrial& base = facts.base;
  const double setup_s = std::max(0.0, base.seconds - base.fit_seconds);
  DoctorExperiments out;
  if (facts.batch_auto) out.skipped["overhead"] = "not measured: data.batch_size is auto (the finder measures the largest micro-batch that fits)";
  for (std::size_t i = 0; i < experiments.size(); ++i) {
    const Experiment& e = experiments[i];
    const double left = options.budget_s - since(start);
    // As long as the baseline trained at most (comparable measurements), and an equal share of what is left. A trial
    // goes on past it only to reach its 5 optimizer steps (lab/trial.h), and stops at the first record after it.
    const double share = std::min(base.fit_seconds, left / static_cast<double>(experiments.size() - i) - setup_s);
    const double needed = 5 * std::max(base.step_ms, base.first_step_ms / 5) / 1e3;
    if (options.stop_flag && options.stop_flag->load()) {
      out.skipped[e.id] = "stopped (signal)";
      continue;
    }
    if (share < needed) {
      out.skipped[e.id] = fmt::format("not measured: {:.1f} s of the {:.0f} s budget were left for this trial, it needs about {:.1f} s; raise --budget",
                                      std::max(0.0, share), options.budget_s, needed + setup_s);
      continue;
    }
    DoctorTrial t = trials.run(e.name, e.overrides, share);
    out.done[e.id] = t;
    report.trials.push_back(t);
  }
  return out;
}

}  // namespace doctor_impl

using namespace doctor_impl;

const DoctorFinding* DoctorReport::find(const std::string& id) const {
  for (const auto& f : findings) {
    if (f.id == id) return &f;
  }
  return nullptr;
}

const DoctorTrial* DoctorReport::trial(const std::string& name) const {
  for (const auto& t : trials) {
    if (t.name == name) return &t;
  }
  return nullptr;
}

DoctorReport doctor(const config::Config& base_config, const DoctorOptions& options) {
  BELLOWS_CHECK_CONFIG(options.budget_s > 0, fmt::format("the doctor's budget is {} s, expected > 0", options.budget_s),
                       "give --budget a duration such as 60s or 2m");
  const Clock::time_point start = Clock::now();
  const hw::HardwareInfo& hw = hw::HardwareInfo::get();
  DoctorReport report;
  report.config_name = app::run_settings(base_config).name;
  report.budget_s = options.budget_s;
  report.machine = doctor_machine_line(hw);

  TrialRunner trials(base_config, "doctor", options.progress, options.stop_flag);  // its directory goes with it

  // --- baseline: the configured run ---
  const DoctorTrial base = trials.run("baseline", {}, std::max(1.0, options.budget_s / 4), 5, /*baseline=*/true);
  report.trials.push_back(base);
  if (!base.measured()) {  // (its errors are the run's: TrialRunner rethrows them) too slow, or stopped by a signal
    DoctorFinding f{"baseline", "problem", fmt::format("the configured run trained {} steps in its trial, too few to measure", base.steps),
                    {trial_line(base)}, {}, 0, "baseline"};
    report.findings.push_back(f);
    report.seconds = since(start);
    return report;
  }

  // --- which experiments the baseline calls for, then the experiments ---
  const DoctorFacts facts = read_baseline_facts(base_config, base, hw);
  const std::vector<Experiment> experiments = doctor_experiments(base_config, facts);
  const DoctorExperiments measured = run_doctor_experiments(trials, experiments, facts, options, start, report);

  // --- findings ---
  for (DoctorFinding& f : doctor_findings(base_config, facts, measured)) report.findings.push_back(std::move(f));
  report.seconds = since(start);
  return report;
}

nlohmann::json DoctorReport::to_json() const {
  nlohmann::json j;
  j["config"] = config_name;
  j["machine"] = machine;
  j["budget_s"] = budget_s;
  j["seconds"] = seconds;
  j["thresholds"] = {{"input_bound_fraction", kInputBoundFraction}, {"min_gain", kMinGain}, {"overhead_gain", kOverheadGain},
                     {"memory_close_fraction", kMemoryCloseFraction}, {"slow_first_step", kSlowFirstStep}};
  j["trials"] = nlohmann::json::array();
  for (const auto& t : trials) {
    nlohmann::json phases = nlohmann::json::object();
    for (std::size_t i = 0; i < t.phase_ms.size(); ++i) phases[obs::phase_name(static_cast<obs::Phase>(i))] = t.phase_ms[i];
    nlohmann::json losses = nlohmann::json::array();
    for (const auto& [step, loss] : t.losses) losses.push_back({step, std::isfinite(loss) ? nlohmann::json(loss) : nlohmann::json(nullptr)});
    j["trials"].push_back({{"name", t.name}, {"overrides", t.overrides}, {"error", t.error}, {"seconds", t.seconds}, {"fit_seconds", t.fit_seconds},
                           {"steps", t.steps}, {"samples_per_step", t.batch_size}, {"device", t.device}, {"precision", t.precision},
                           {"threads", t.threads}, {"workers", t.workers}, {"prefetch", t.prefetch}, {"first_step_ms", t.first_step_ms},
                           {"step_ms", t.step_ms}, {"step_spread", t.step_spread}, {"samples_per_s", t.samples_per_s}, {"phase_ms", phases},
                           {"mem_peak_mb", t.mem_peak_mb}, {"rss_peak_mb", t.rss_peak_mb}, {"mfu", t.mfu}, {"gflops", t.gflops},
                           {"skipped_steps", t.skipped_steps}, {"fetch_ms_per_batch", t.fetch_ms_per_batch}, {"losses", losses},
                           {"held_mb", {{"weights", t.held_mb[0]}, {"gradients", t.held_mb[1]}, {"optimizer", t.held_mb[2]}, {"ema", t.held_mb[3]}}}});
  }
  j["findings"] = nlohmann::json::array();
  for (const auto& f : findings) {
    j["findings"].push_back({{"id", f.id}, {"status", f.status}, {"summary", f.summary}, {"evidence", f.evidence}, {"advice", f.advice},
                             {"gain", f.gain}, {"trial", f.trial}});
  }
  return j;
}

std::string DoctorReport::to_text() const {
  std::string out = fmt::format("bellows doctor: '{}' on {}\n{} trial(s) in {:.1f} s (budget {:.0f} s), each measured on this machine:\n", config_name,
                                machine, trials.size(), seconds, budget_s);
  for (const auto& t : trials) {
    out += fmt::format("  {:<44} {:>6} steps {:>9.3g} ms/step {:>10} samples/s{}\n", t.name, t.steps, t.step_ms, rate(t.samples_per_s),
                       t.error.empty() ? "" : "  (ended: " + t.error + ")");
    if (t.name == "baseline" && t.steps > 0) out += fmt::format("  {:<44} {}\n", "", phases_line(t));
  }
  out += "findings:\n";
  for (const auto& f : findings) {
    out += fmt::format("  [{}] {}: {}\n", f.status, f.id, f.summary);
    for (const auto& e : f.evidence) out += fmt::format("      {}\n", e);
    if (!f.advice.empty()) out += fmt::format("      -> use: {}\n", fmt::join(f.advice, " "));
  }
  std::vector<std::string> all;
  for (const auto& f : findings) all.insert(all.end(), f.advice.begin(), f.advice.end());
  out += all.empty() ? "no setting to change: nothing measured faster or safer than the configured run\n"
                     : fmt::format("the advice, measured one change at a time (together: not measured): {}\n", fmt::join(all, " "));
  return out;
}

}  // namespace bellows::lab
