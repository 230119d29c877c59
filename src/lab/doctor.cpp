// Measured trials and the diagnosis; see doctor.h.
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
#include "bellows/util/format.h"  // defines: percent_text

namespace bellows::lab {
namespace fs = std::filesystem;

namespace doctor_impl {  // named, not anonymous: the unity build compiles this file with the other app sources

using Clock = std::chrono::steady_clock;
double since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }
std::string rate(double per_s) { return format_rate(per_s); }
constexpr std::size_t kData = static_cast<std::size_t>(obs::Phase::kData);

std::string pct(double fraction) { return fmt::format("{:.1f}%", 100 * fraction); }


std::string phases_line(const DoctorTrial& t) {
  const double total = step_total(t);
  std::string out;
  for (std::size_t i = 0; i < t.phase_ms.size(); ++i) {
    out += fmt::format("{}{} {:.0f}%", out.empty() ? "" : " ", obs::phase_name(static_cast<obs::Phase>(i)), total > 0 ? 100 * t.phase_ms[i] / total : 0.0);
  }
  return out;
}

double gain(const DoctorTrial& base, const DoctorTrial& t) {
  return base.samples_per_s > 0 && t.error.empty() && t.steps >= 3 ? t.samples_per_s / base.samples_per_s : 0;
}

std::string trial_line(const DoctorTrial& t) {
  return fmt::format("{}: {} steps in {:.1f} s, median {:.3g} ms/step (spread {}), {} samples/s", t.name, t.steps, t.fit_seconds,
                     t.step_ms, pct(t.step_spread), rate(t.samples_per_s));
}

// Mean training loss over the steps both trials ran (finite in both), for each.
std::pair<double, double> common_loss(const DoctorTrial& a, const DoctorTrial& b, std::int64_t* steps) {
  std::map<std::int64_t, double> in_b(b.losses.begin(), b.losses.end());
  double sa = 0, sb = 0;
  std::int64_t n = 0;
  for (const auto& [step, loss] : a.losses) {
    const auto it = in_b.find(step);
    if (it == in_b.end() || !std::isfinite(loss) || !std::isfinite(it->second)) continue;
    sa += loss;
    sb += it->second;
    ++n;
  }
  *steps = n;
  return n > 0 ? std::make_pair(sa / n, sb / n) : std::make_pair(0.0, 0.0);
}

struct Experiment {
  std::string id;
  std::string name;
  std::vector<std::string> overrides;
};

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
  report.config_name = config::get_string(base_config, "name");
  report.budget_s = options.budget_s;
  report.machine = fmt::format("{}, {} usable cores, {:.1f} GiB RAM{}", hw.cpu.model_name, hw.cpu.usable_cpus, hw.memory.total_bytes / double(1LL << 30),
                               hw.cuda.usable && !hw.cuda.gpus.empty() ? fmt::format(", GPU {}", hw.cuda.gpus[0].name) : std::string());

  TrialRunner trials(base_config, "doctor", options.progress, options.stop_flag);  // its directory goes with it

  // --- baseline: the configured run ---
  const DoctorTrial base = trials.run("baseline", {}, std::max(1.0, options.budget_s / 4), 5, /*baseline=*/true);
  report.trials.push_back(base);
  const int cores = std::max(1, hw.cpu.usable_cpus);

  if (!base.measured()) {  // (its errors are the run's: TrialRunner rethrows them) too slow, or stopped by a signal
    DoctorFinding f{"baseline", "problem", fmt::format("the configured run trained {} steps in its trial, too few to measure", base.steps),
                    {trial_line(base)}, {}, 0, "baseline"};
    report.findings.push_back(f);
    report.seconds = since(start);
    return report;
  }

  // --- which experiments the baseline calls for ---
  std::vector<Experiment> experiments;
  bool nonfinite = base.skipped_steps > 0;
  std::int64_t first_bad_step = 0;
  for (const auto& [step, loss] : base.losses) {
    if (!std::isfinite(loss)) {
      nonfinite = true;
      first_bad_step = step;
      break;
    }
  }
  if (nonfinite) experiments.push_back({"nonfinite", "train.detect_anomaly=true", {"train.detect_anomaly=true"}});
  const double compute_ms = step_total(base) - base.phase_ms[kData];
  const bool input_bound = data_fraction(base) > kInputBoundFraction;
  std::int64_t want_workers = 0;
  if (input_bound) {
    // Workers that hide the fetch: a batch takes `fetch` ms to load and the step computes for `compute` ms.
    const double fetch = base.workers == 0 ? base.phase_ms[kData] : std::max(base.fetch_ms_per_batch, base.phase_ms[kData]);
    const auto needed = static_cast<std::int64_t>(std::ceil(1.25 * fetch / std::max(compute_ms, 0.05)));
    want_workers = std::clamp<std::int64_t>(std::max(needed, base.workers + 1), base.workers + 1, std::max<std::int64_t>(4, 2 * cores));
    const std::int64_t want_prefetch = std::max<std::int64_t>(base.prefetch, 2 * want_workers);
    experiments.push_back({"input", fmt::format("data.workers={} data.prefetch={}", want_workers, want_prefetch),
                           {fmt::format("data.workers={}", want_workers), fmt::format("data.prefetch={}", want_prefetch)}});
  }
  // The precision the plan's `auto` picks here, when cheaper than the one running.
  const plan::Plan auto_plan = app::plan_with_auto_precision(base_config, hw);
  std::string auto_reason;
  for (const auto& e : auto_plan.entries) {
    if (e.key == "precision") auto_reason = e.reason;
  }
  const bool full_precision = !base.precision.empty() && !precision::find_precision(base.precision).mixed();
  // Or, where the run is in a reduced precision (auto's choice or the user's), fp32 against it: a change of numerics
  // is earned by speed, and fp32 was measured faster for a model on a CPU with bf16 units (issue 44).
  const std::string other_precision = full_precision ? auto_plan.precision : "fp32";
  if (full_precision && auto_plan.precision != base.precision && precision::find_precision(auto_plan.precision).mixed()) {
    experiments.push_back({"precision", "precision=" + auto_plan.precision, {"precision=" + auto_plan.precision}});
  } else if (!base.precision.empty() && !full_precision) {
    experiments.push_back({"precision", "precision=fp32", {"precision=fp32"}});
  }
  const bool batch_auto = config::is_word(base_config, "data.batch_size", "auto");  // the finder chooses the micro-batch
  const std::int64_t batch = app::loaded_batch_size(base_config);
  const std::int64_t accumulation = config::get_int(base_config, "train.accumulation_steps");
  if (batch_auto) {
    // no batch-size trial: the run's micro-batch is measured by the finder, its effective batch set by the user
  } else if (accumulation >= 2 && accumulation % 2 == 0) {
    experiments.push_back({"overhead", fmt::format("data.batch_size={} train.accumulation_steps={}", 2 * batch, accumulation / 2),
                           {fmt::format("data.batch_size={}", 2 * batch), fmt::format("train.accumulation_steps={}", accumulation / 2)}});
  } else {
    experiments.push_back({"overhead", fmt::format("data.batch_size={}", 2 * batch), {fmt::format("data.batch_size={}", 2 * batch)}});
  }
  if (base.device == "cpu" && !input_bound) {
    const std::int64_t threads = base.threads, workers = base.workers;
    std::int64_t other = 0;
    if (workers > 0 && threads + workers > cores && cores - workers >= 1) other = cores - workers;
    else if (threads + workers < cores) other = cores - workers;
    if (other > 0 && other != threads) experiments.push_back({"threads", fmt::format("threads={}", other), {fmt::format("threads={}", other)}});
  }
  // Memory: the budget a step may use, and the run's use against it.
  const double budget_gib = config::get_double(base_config, "memory_budget_gib");
  const bool on_cuda = base.device.rfind("cuda", 0) == 0;
  double budget_mb = 0;
  if (budget_gib > 0) budget_mb = budget_gib * double(1LL << 30) / 1e6;
  else if (on_cuda && !hw.cuda.gpus.empty()) budget_mb = hw.cuda.gpus[0].total_memory_bytes / 1e6;
  else budget_mb = (hw.memory.available_bytes + std::max<std::int64_t>(0, obs::process_memory().rss_bytes)) / 1e6;
  const double used_mb = on_cuda || budget_gib > 0 ? base.mem_peak_mb : base.rss_peak_mb;
  const bool memory_close = budget_mb > 0 && used_mb > kMemoryCloseFraction * budget_mb;
  if (memory_close) experiments.push_back({"memory", "checkpointing=[*]", {"checkpointing=['*']"}});
  if (config::get_string(base_config, "optim.implementation") == "foreach") {
    experiments.push_back({"fused", "optim.implementation=fused", {"optim.implementation=fused"}});
  }

  // --- the experiments, sharing what is left of the budget ---
  const double setup_s = std::max(0.0, base.seconds - base.fit_seconds);
  std::map<std::string, DoctorTrial> done;
  std::map<std::string, std::string> skipped;  // id -> why not measured
  if (batch_auto) skipped["overhead"] = "not measured: data.batch_size is auto (the finder measures the largest micro-batch that fits)";
  for (std::size_t i = 0; i < experiments.size(); ++i) {
    const Experiment& e = experiments[i];
    const double left = options.budget_s - since(start);
    // As long as the baseline trained at most (comparable measurements), and an equal share of what is left. A trial
    // goes on past it only to reach its 5 optimizer steps (lab/trial.h), and stops at the first record after it.
    const double share = std::min(base.fit_seconds, left / static_cast<double>(experiments.size() - i) - setup_s);
    const double needed = 5 * std::max(base.step_ms, base.first_step_ms / 5) / 1e3;
    if (options.stop_flag && options.stop_flag->load()) {
      skipped[e.id] = "stopped (signal)";
      continue;
    }
    if (share < needed) {
      skipped[e.id] = fmt::format("not measured: {:.1f} s of the {:.0f} s budget were left for this trial, it needs about {:.1f} s; raise --budget",
                                  std::max(0.0, share), options.budget_s, needed + setup_s);
      continue;
    }
    DoctorTrial t = trials.run(e.name, e.overrides, share);
    done[e.id] = t;
    report.trials.push_back(t);
  }
  auto not_measured = [&](const std::string& id) {
    const auto it = skipped.find(id);
    return it != skipped.end() ? it->second : std::string("not measured");
  };

  // --- findings ---
  // Non-finite values.
  {
    DoctorFinding f{"nonfinite", "ok", "", {}, {}, 0, ""};
    if (!nonfinite) {
      f.summary = fmt::format("every training loss of the baseline's {} steps was finite, and no step was skipped", base.steps);
    } else {
      f.status = "problem";
      f.summary = first_bad_step > 0 ? fmt::format("the training loss first became non-finite at optimizer step {}", first_bad_step)
                                     : fmt::format("the loss stayed finite, but {} of {} steps were skipped on non-finite gradients", base.skipped_steps, base.steps);
      if (!base.first_nonfinite.empty()) f.evidence.push_back("the trainer: " + base.first_nonfinite);
      if (base.skipped_steps > 0) {
        f.evidence.push_back(!base.precision.empty() && precision::find_precision(base.precision).scales_loss
                                 ? fmt::format("the loss scaler skipped {} of {} steps (loss scale now {:g}): skipping hides non-finite gradients, "
                                               "those steps changed nothing", base.skipped_steps, base.steps, base.loss_scale)
                                 : fmt::format("{} of {} steps were skipped on non-finite gradients ({} has no loss scaler: the values "
                                               "themselves were non-finite); those steps changed nothing", base.skipped_steps, base.steps, base.precision));
      }
      if (const auto it = done.find("nonfinite"); it != done.end()) {
        f.trial = it->second.name;
        f.evidence.push_back(it->second.error.empty() ? fmt::format("with train.detect_anomaly=true no tensor went non-finite in {} steps "
                                                                    "(the non-finite values came from the loss scaler's overflow checks)", it->second.steps)
                                                      : "train.detect_anomaly found: " + it->second.error);
      } else {
        f.evidence.push_back("the anomaly trial: " + not_measured("nonfinite"));
      }
    }
    report.findings.push_back(f);
  }
  // Input-bound.
  {
    DoctorFinding f{"input", "ok", "", {}, {}, 0, ""};
    const std::string loader = base.workers > 0 ? fmt::format("{} worker(s), prefetch {}", base.workers, base.prefetch) : "loading in the training thread";
    f.evidence.push_back(fmt::format("baseline: waiting for data {:.3g} ms of a {:.3g} ms step ({}); {}", base.phase_ms[kData], step_total(base),
                                     pct(data_fraction(base)), loader));
    if (base.fetch_ms_per_batch > 0) {
      f.evidence.push_back(fmt::format("the loader's stages take {:.3g} ms per batch; the slowest is {}", base.fetch_ms_per_batch, base.slowest_stage));
    }
    if (!input_bound) {
      f.summary = fmt::format("not input-bound: waiting for data is {} of the step (threshold {})", pct(data_fraction(base)), pct(kInputBoundFraction));
    } else if (const auto it = done.find("input"); it != done.end()) {
      const DoctorTrial& t = it->second;
      f.trial = t.name;
      f.gain = gain(base, t);
      f.evidence.push_back(trial_line(t) + fmt::format("; waiting for data {}", pct(data_fraction(t))));
      if (f.gain >= kMinGain) {
        f.status = "advice";
        f.advice = t.overrides;
        f.summary = fmt::format("input-bound: the step waits for data {} of the time; {} made training {:.2f}x faster (measured)",
                                pct(data_fraction(base)), t.name, f.gain);
      } else {
        f.status = "problem";
        f.summary = fmt::format("input-bound ({} of the step waits for data), and {} did not help ({:.2f}x): loading competes with the "
                                "compute for {} core(s)", pct(data_fraction(base)), t.name, f.gain, cores);
        f.evidence.push_back(fmt::format("cheaper decode or caching decoded samples would help: not measured (bellows has no decoded-sample "
                                         "cache; the slowest stage is {}; `bellows bench data` times the pipeline alone)", base.slowest_stage));
      }
    } else {
      f.status = "not measured";
      f.summary = fmt::format("input-bound ({} of the step waits for data); more workers: {}", pct(data_fraction(base)), not_measured("input"));
    }
    report.findings.push_back(f);
  }
  // Precision.
  {
    DoctorFinding f{"precision", "ok", "", {}, {}, 0, ""};
    if (const auto it = done.find("precision"); it != done.end()) {
      const DoctorTrial& t = it->second;
      f.trial = t.name;
      f.gain = gain(base, t);
      std::int64_t n = 0;
      const auto [loss_base, loss_t] = common_loss(base, t, &n);
      f.evidence.push_back(trial_line(base));
      f.evidence.push_back(trial_line(t));
      if (n > 0) {
        f.evidence.push_back(fmt::format("mean training loss over the {} steps both ran: {} {:.6g}, {} {:.6g} ({:+.2f}%)", n, base.precision, loss_base,
                                         t.precision, loss_t, loss_base != 0 ? 100 * (loss_t - loss_base) / std::fabs(loss_base) : 0.0));
      }
      if (f.gain >= kMinGain) {
        f.status = "advice";
        f.advice = t.overrides;
        f.summary = fmt::format("{} is {:.2f}x faster than {} here (measured){}", t.precision, f.gain, base.precision,
                                n > 0 ? fmt::format("; the mean loss moved {:+.2f}% over the same steps", loss_base != 0 ? 100 * (loss_t - loss_base) / std::fabs(loss_base) : 0.0)
                                      : std::string());
      } else {
        f.summary = fmt::format("{} was not faster than {} in its trial ({:.2f}x, below the {:.2f}x advised): keep {}", t.precision, base.precision,
                               f.gain, kMinGain, base.precision);
      }
    } else if (skipped.count("precision")) {
      f.status = "not measured";
      f.summary = fmt::format("{} might be faster than {}: {}", other_precision, base.precision, not_measured("precision"));
    } else if (!full_precision) {
      f.summary = fmt::format("already a reduced precision: {}", base.precision);
    } else {
      f.summary = fmt::format("no cheaper precision to try on {}: the plan's auto choice is {} ({})", base.device, auto_plan.precision, auto_reason);
    }
    report.findings.push_back(f);
  }
  // Overhead: step time against batch size.
  {
    DoctorFinding f{"overhead", "ok", "", {}, {}, 0, ""};
    if (base.mfu >= 0) {
      f.evidence.push_back(fmt::format("baseline MFU {} ({:.4g} GFLOP/s achieved)", percent_text(base.mfu), base.gflops));
    } else if (base.gflops < 0 && base.steps >= 2) {  // the second step is the counted one
      f.evidence.push_back("baseline MFU not counted: no FLOPs were counted for the model's step (log.flops off, or none of its ops "
                           "has a FLOP formula)");
    }
    if (const auto it = done.find("overhead"); it != done.end()) {
      const DoctorTrial& t = it->second;
      f.trial = t.name;
      f.gain = gain(base, t);
      f.evidence.push_back(trial_line(base));
      f.evidence.push_back(trial_line(t));
      const bool same_effective = accumulation >= 2 && accumulation % 2 == 0;
      if (f.gain >= kMinGain) {
        f.status = "advice";
        f.advice = t.overrides;
        f.summary = fmt::format("{}: {} gives {:.2f}x the samples/s (a step of twice the samples took {:.2f}x the time){}",
                                f.gain >= kOverheadGain ? "overhead-bound" : "a larger batch helps", t.name, f.gain, t.step_ms / std::max(base.step_ms, 1e-9),
                                same_effective ? "; the effective batch is unchanged" : "; the effective batch doubles: the learning rate may need retuning (not measured)");
      } else {
        f.summary = fmt::format("not overhead-bound: twice the batch gave {:.2f}x the samples/s (step time {:.2f}x): the step scales with its work", f.gain,
                                t.step_ms / std::max(base.step_ms, 1e-9));
      }
    } else {
      f.status = "not measured";
      f.summary = "step time against batch size: " + not_measured("overhead");
    }
    const std::string impl = config::get_string(base_config, "optim.implementation");
    if (const auto it = done.find("fused"); it != done.end()) {
      const double g = gain(base, it->second);
      f.evidence.push_back(trial_line(it->second) + fmt::format(" ({:.2f}x)", g));
      if (g >= kMinGain && f.status != "advice") {
        f.status = "advice";
        f.advice = it->second.overrides;
        f.gain = g;
        f.trial = it->second.name;
        f.summary += fmt::format("; the fused optimizer is {:.2f}x faster than foreach (measured)", g);
      }
    } else if (impl != "foreach") {
      f.evidence.push_back(fmt::format("optim.implementation {}: the fused optimizer kernels run where every parameter has one", impl));
    }
    if (on_cuda) f.evidence.push_back("CUDA graphs: not measured (bellows does not capture the training step in a CUDA graph)");
    report.findings.push_back(f);
  }
  // Memory.
  {
    DoctorFinding f{"memory", "ok", "", {}, {}, 0, ""};
    const std::string what = on_cuda || budget_gib > 0 ? "peak tensor memory" : "peak process memory (RSS)";
    const std::string budget_what = budget_gib > 0 ? "memory_budget_gib" : on_cuda ? "the GPU's memory" : "available RAM";
    if (budget_mb > 0 && used_mb > 0) {
      f.evidence.push_back(fmt::format("baseline: {} {:.1f} MB of {:.1f} MB ({}, {}); tensor peak {:.1f} MB", what, used_mb, budget_mb, budget_what,
                                       pct(used_mb / budget_mb), base.mem_peak_mb));
      // Each sample's memory, from the 2x-batch trial's tensor peak.
      double per_sample_mb = 0;
      if (const auto it = done.find("overhead"); it != done.end() && it->second.mem_peak_mb > 0 && base.mem_peak_mb > 0 &&
                                                 it->second.batch_size > base.batch_size) {
        per_sample_mb = (it->second.mem_peak_mb - base.mem_peak_mb) / static_cast<double>(it->second.batch_size - base.batch_size);
      }
      if (per_sample_mb > 0) f.evidence.push_back(fmt::format("each sample of a step adds {:.3g} MB of tensor memory (the 2x batch trial's peak)", per_sample_mb));
      if (const auto& h = base.held_mb; h[0] >= 0 && base.mem_peak_mb > 0) {
        // Per rank: what every rank of a data-parallel job holds alike under ddp (zero1, zero2 and fsdp shard it).
        const double between = h[0] + h[1] + h[2] + h[3];
        f.evidence.push_back(fmt::format("tensor memory per rank by category, between steps: weights {:.3g} MB, gradient buffers {:.3g} MB, "
                                         "optimizer state {:.3g} MB, EMA {:.3g} MB; the rest of the {:.3g} MB peak ({:.3g} MB) is the step's "
                                         "activations, gradients and temporaries (the bytes per rank under ddp, zero1, zero2 and fsdp: the plan "
                                         "row of dist.strategy: auto, docs/distributed.md)",
                                         h[0], h[1], h[2], h[3], base.mem_peak_mb, std::max(0.0, base.mem_peak_mb - between)));
      }
      if (!memory_close) {
        f.summary = fmt::format("{} uses {} of {}: headroom {:.0f} MB", what, pct(used_mb / budget_mb), budget_what, budget_mb - used_mb);
        if (per_sample_mb > 0) {
          // Linear in the batch (the two trials' peaks); beyond 64x the batch other limits come first.
          const double fit = static_cast<double>(batch) + (kMemoryCloseFraction * budget_mb - used_mb) / per_sample_mb / static_cast<double>(accumulation);
          f.summary += fit > 64.0 * static_cast<double>(batch)
                           ? fmt::format("; more than 64x the batch ({} samples per micro-batch) would stay under {} of it", 64 * batch, pct(kMemoryCloseFraction))
                           : fmt::format("; about {:.0f} samples per micro-batch would stay under {} of it", std::floor(fit), pct(kMemoryCloseFraction));
        }
      } else if (const auto it = done.find("memory"); it != done.end()) {
        const DoctorTrial& t = it->second;
        f.trial = t.name;
        f.gain = gain(base, t);
        f.evidence.push_back(trial_line(t) + fmt::format("; tensor peak {:.1f} MB", t.mem_peak_mb));
        if (!t.error.empty()) {
          f.status = "problem";
          f.summary = fmt::format("{} is {} of {}; activation checkpointing could not be tried: {}", what, pct(used_mb / budget_mb), budget_what, t.error);
        } else {
          const double saved = base.mem_peak_mb - t.mem_peak_mb;
          f.status = saved > 0 ? "advice" : "problem";
          if (saved > 0) f.advice = t.overrides;
          f.summary = fmt::format("{} is {} of {}: activation checkpointing of every block saved {:.1f} MB of tensor memory ({}) at {:.2f}x the "
                                  "step time (measured)", what, pct(used_mb / budget_mb), budget_what, saved,
                                  pct(base.mem_peak_mb > 0 ? saved / base.mem_peak_mb : 0), t.step_ms / std::max(base.step_ms, 1e-9));
        }
      } else {
        f.status = "not measured";
        f.summary = fmt::format("{} is {} of {}; activation checkpointing: {}", what, pct(used_mb / budget_mb), budget_what, not_measured("memory"));
      }
    } else {
      f.status = "not measured";
      f.summary = "memory: the device's memory is not counted here";
    }
    report.findings.push_back(f);
  }
  // Threads.
  {
    DoctorFinding f{"threads", "ok", "", {}, {}, 0, ""};
    f.evidence.push_back(fmt::format("baseline: {} intra-op thread(s), {} loader worker(s), {} usable core(s)", base.threads, base.workers, cores));
    if (const auto it = done.find("threads"); it != done.end()) {
      const DoctorTrial& t = it->second;
      f.trial = t.name;
      f.gain = gain(base, t);
      f.evidence.push_back(trial_line(base));
      f.evidence.push_back(trial_line(t));
      if (f.gain >= kMinGain) {
        f.status = "advice";
        f.advice = t.overrides;
        f.summary = fmt::format("{} is {:.2f}x faster than {} thread(s) beside {} worker(s) on {} core(s) (measured)", t.name, f.gain, base.threads, base.workers, cores);
      } else {
        f.summary = fmt::format("{} was not faster ({:.2f}x): keep {} thread(s)", t.name, f.gain, base.threads);
      }
    } else if (skipped.count("threads")) {
      f.status = "not measured";
      f.summary = "another thread count: " + not_measured("threads");
    } else if (base.device != "cpu") {
      f.summary = fmt::format("{} intra-op thread(s) and {} worker(s) feed {}: the host threads do not compute the step", base.threads, base.workers, base.device);
    } else if (input_bound) {
      f.summary = "not tried: the run is input-bound; the input finding's trial changed the workers";
    } else {
      f.summary = fmt::format("{} compute thread(s) and {} loader worker(s) use the {} core(s) without oversubscribing them", base.threads, base.workers, cores);
    }
    report.findings.push_back(f);
  }
  // The first step.
  {
    DoctorFinding f{"first_step", "ok", "", {}, {}, 0, ""};
    const double ratio = base.step_ms > 0 ? base.first_step_ms / base.step_ms : 0;
    f.evidence.push_back(fmt::format("baseline: first step {:.3g} ms, median {:.3g} ms", base.first_step_ms, base.step_ms));
    if (ratio > kSlowFirstStep) {
      f.status = "info";
      f.summary = fmt::format("the first step took {:.1f}x the median step ({:.3g} ms): one-time costs (allocator warm-up, lazy initialisation{}); "
                              "they do not recur, and the trials' step times leave it out", ratio, base.first_step_ms,
                              on_cuda ? ", cuDNN's algorithm search with cudnn_benchmark" : "");
    } else {
      f.summary = fmt::format("the first step took {:.1f}x the median step: no warm-up cost worth noting", ratio);
    }
    report.findings.push_back(f);
  }
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
