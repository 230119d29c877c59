// The doctor's findings, one per check, from the baseline and the experiments' trials; see doctor.h. The trials
// are run in doctor.cpp.
#include "bellows/app/trainer_setup.h"
#include "bellows/lab/doctor.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "bellows/config/schema.h"  // defines: get_string
#include "bellows/precision/registry.h"
#include "bellows/util/format.h"  // defines: percent_text
#include "lab/internal/doctor_diagnosis.h"  // defines: DoctorFacts, DoctorExperiments, pct, gain, trial_line

namespace bellows::lab::doctor_impl {

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

// The finding's trial and its speed-up, with the baseline's line and the trial's as evidence.
void compare_with_baseline(DoctorFinding& f, const DoctorTrial& base, const DoctorTrial& t) {
  f.trial = t.name;
  f.gain = gain(base, t);
  f.evidence.push_back(trial_line(base));
  f.evidence.push_back(trial_line(t));
}

// Non-finite values: where the loss first went non-finite, the steps skipped, and what train.detect_anomaly found.
DoctorFinding nonfinite_finding(const DoctorFacts& facts, const DoctorExperiments& experiments) {
  const DoctorTrial& base = facts.base;
  DoctorFinding f{"nonfinite", "ok", "", {}, {}, 0, ""};
  if (!facts.nonfinite) {
    f.summary = fmt::format("every training loss of the baseline's {} steps was finite, and no step was skipped", base.steps);
  } else {
    f.status = "problem";
    f.summary = facts.first_bad_step > 0 ? fmt::format("the training loss first became non-finite at optimizer step {}", facts.first_bad_step)
                                   : fmt::format("the loss stayed finite, but {} of {} steps were skipped on non-finite gradients", base.skipped_steps, base.steps);
    if (!base.first_nonfinite.empty()) f.evidence.push_back("the trainer: " + base.first_nonfinite);
    if (base.skipped_steps > 0) {
      f.evidence.push_back(!base.precision.empty() && precision::find_precision(base.precision).scales_loss
                               ? fmt::format("the loss scaler skipped {} of {} steps (loss scale now {:g}): skipping hides non-finite gradients, "
                                             "those steps changed nothing", base.skipped_steps, base.steps, base.loss_scale)
                               : fmt::format("{} of {} steps were skipped on non-finite gradients ({} has no loss scaler: the values "
                                             "themselves were non-finite); those steps changed nothing", base.skipped_steps, base.steps, base.precision));
    }
    if (const auto it = experiments.done.find("nonfinite"); it != experiments.done.end()) {
      f.trial = it->second.name;
      f.evidence.push_back(it->second.error.empty() ? fmt::format("with train.detect_anomaly=true no tensor went non-finite in {} steps "
                                                                  "(the non-finite values came from the loss scaler's overflow checks)", it->second.steps)
                                                    : "train.detect_anomaly found: " + it->second.error);
    } else {
      f.evidence.push_back("the anomaly trial: " + experiments.not_measured("nonfinite"));
    }
  }
  return f;
}

// Input-bound: the share of the step spent waiting for data, and whether more workers hid it.
DoctorFinding input_finding(const DoctorFacts& facts, const DoctorExperiments& experiments) {
  const DoctorTrial& base = facts.base;
  DoctorFinding f{"input", "ok", "", {}, {}, 0, ""};
  const std::string loader = base.workers > 0 ? fmt::format("{} worker(s), prefetch {}", base.workers, base.prefetch) : "loading in the training thread";
  f.evidence.push_back(fmt::format("baseline: waiting for data {:.3g} ms of a {:.3g} ms step ({}); {}", base.phase_ms[kData], step_total(base),
                                   pct(data_fraction(base)), loader));
  if (base.fetch_ms_per_batch > 0) {
    f.evidence.push_back(fmt::format("the loader's stages take {:.3g} ms per batch; the slowest is {}", base.fetch_ms_per_batch, base.slowest_stage));
  }
  if (!facts.input_bound) {
    f.summary = fmt::format("not input-bound: waiting for data is {} of the step (threshold {})", pct(data_fraction(base)), pct(kInputBoundFraction));
  } else if (const auto it = experiments.done.find("input"); it != experiments.done.end()) {
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
                              "compute for {} core(s)", pct(data_fraction(base)), t.name, f.gain, facts.cores);
      f.evidence.push_back(fmt::format("cheaper decode or caching decoded samples would help: not measured (bellows has no decoded-sample "
                                       "cache; the slowest stage is {}; `bellows bench data` times the pipeline alone)", base.slowest_stage));
    }
  } else {
    f.status = "not measured";
    f.summary = fmt::format("input-bound ({} of the step waits for data); more workers: {}", pct(data_fraction(base)), experiments.not_measured("input"));
  }
  return f;
}

// Precision: the other precision's speed and how far the losses moved over the same steps.
DoctorFinding precision_finding(const DoctorFacts& facts, const DoctorExperiments& experiments) {
  const DoctorTrial& base = facts.base;
  DoctorFinding f{"precision", "ok", "", {}, {}, 0, ""};
  if (const auto it = experiments.done.find("precision"); it != experiments.done.end()) {
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
  } else if (experiments.skipped.count("precision")) {
    f.status = "not measured";
    f.summary = fmt::format("{} might be faster than {}: {}", facts.other_precision, base.precision, experiments.not_measured("precision"));
  } else if (!facts.full_precision) {
    f.summary = fmt::format("already a reduced precision: {}", base.precision);
  } else {
    f.summary = fmt::format("no cheaper precision to try on {}: the plan's auto choice is {} ({})", base.device, facts.auto_plan.precision, facts.auto_reason);
  }
  return f;
}

// The fused optimizer's trial (optim.implementation: foreach), advised where faster and nothing else is.
void add_fused_optimizer_result(DoctorFinding& f, const config::Config& base_config, const DoctorFacts& facts,
                                const DoctorExperiments& experiments) {
  const std::string impl = app::trainer_settings(base_config).optimizer.implementation;
  if (const auto it = experiments.done.find("fused"); it != experiments.done.end()) {
    const double g = gain(facts.base, it->second);
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
}

// Overhead: step time against batch size; the fused optimizer against foreach.
DoctorFinding overhead_finding(const config::Config& base_config, const DoctorFacts& facts, const DoctorExperiments& experiments) {
  const DoctorTrial& base = facts.base;
  DoctorFinding f{"overhead", "ok", "", {}, {}, 0, ""};
  if (base.mfu >= 0) {
    f.evidence.push_back(fmt::format("baseline MFU {} ({:.4g} GFLOP/s achieved)", percent_text(base.mfu), base.gflops));
  } else if (base.gflops < 0 && base.steps >= 2) {  // the second step is the counted one
    f.evidence.push_back("baseline MFU not counted: no FLOPs were counted for the model's step (log.flops off, or none of its ops "
                         "has a FLOP formula)");
  }
  if (const auto it = experiments.done.find("overhead"); it != experiments.done.end()) {
    const DoctorTrial& t = it->second;
    compare_with_baseline(f, base, t);
    const bool same_effective = facts.accumulation >= 2 && facts.accumulation % 2 == 0;
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
    f.summary = "step time against batch size: " + experiments.not_measured("overhead");
  }
  add_fused_optimizer_result(f, base_config, facts, experiments);
  if (facts.on_cuda) f.evidence.push_back("CUDA graphs: not measured (bellows does not capture the training step in a CUDA graph)");
  return f;
}

// Each sample's memory, from the 2x-batch trial's tensor peak; 0 where it is not measured.
double memory_per_sample_mb(const DoctorTrial& base, const DoctorExperiments& experiments) {
  if (const auto it = experiments.done.find("overhead"); it != experiments.done.end() && it->second.mem_peak_mb > 0 && base.mem_peak_mb > 0 &&
                                                         it->second.batch_size > base.batch_size) {
    return (it->second.mem_peak_mb - base.mem_peak_mb) / static_cast<double>(it->second.batch_size - base.batch_size);
  }
  return 0;
}

// The baseline's tensor memory between steps by category, where counted.
void add_held_memory(DoctorFinding& f, const DoctorTrial& base) {
  if (const auto& h = base.held_mb; h[0] >= 0 && base.mem_peak_mb > 0) {
    // Per rank: what every rank of a data-parallel job holds alike under ddp (zero1, zero2 and fsdp shard it).
    const double between = h[0] + h[1] + h[2] + h[3];
    f.evidence.push_back(fmt::format("tensor memory per rank by category, between steps: weights {:.3g} MB, gradient buffers {:.3g} MB, "
                                     "optimizer state {:.3g} MB, EMA {:.3g} MB; the rest of the {:.3g} MB peak ({:.3g} MB) is the step's "
                                     "activations, gradients and temporaries (the bytes per rank under ddp, zero1, zero2 and fsdp: the plan "
                                     "row of dist.strategy: auto, docs/distributed.md)",
                                     h[0], h[1], h[2], h[3], base.mem_peak_mb, std::max(0.0, base.mem_peak_mb - between)));
  }
}

// Far from the budget: the headroom, and about how large a micro-batch would still fit.
std::string memory_headroom_summary(const DoctorFacts& facts, const std::string& what, const std::string& budget_what, double per_sample_mb) {
  std::string summary = fmt::format("{} uses {} of {}: headroom {:.0f} MB", what, pct(facts.used_mb / facts.budget_mb), budget_what, facts.budget_mb - facts.used_mb);
  if (per_sample_mb > 0) {
    // Linear in the batch (the two trials' peaks); beyond 64x the batch other limits come first.
    const double fit = static_cast<double>(facts.batch) + (kMemoryCloseFraction * facts.budget_mb - facts.used_mb) / per_sample_mb / static_cast<double>(facts.accumulation);
    summary += fit > 64.0 * static_cast<double>(facts.batch)
                   ? fmt::format("; more than 64x the batch ({} samples per micro-batch) would stay under {} of it", 64 * facts.batch, pct(kMemoryCloseFraction))
                   : fmt::format("; about {:.0f} samples per micro-batch would stay under {} of it", std::floor(fit), pct(kMemoryCloseFraction));
  }
  return summary;
}

// Close to the budget: what activation checkpointing of every block saved, at what cost in step time.
void add_checkpointing_result(DoctorFinding& f, const DoctorFacts& facts, const DoctorExperiments& experiments, const std::string& what,
                              const std::string& budget_what) {
  const DoctorTrial& base = facts.base;
  const auto it = experiments.done.find("memory");
  if (it == experiments.done.end()) {
    f.status = "not measured";
    f.summary = fmt::format("{} is {} of {}; activation checkpointing: {}", what, pct(facts.used_mb / facts.budget_mb), budget_what, experiments.not_measured("memory"));
    return;
  }
  const DoctorTrial& t = it->second;
  f.trial = t.name;
  f.gain = gain(base, t);
  f.evidence.push_back(trial_line(t) + fmt::format("; tensor peak {:.1f} MB", t.mem_peak_mb));
  if (!t.error.empty()) {
    f.status = "problem";
    f.summary = fmt::format("{} is {} of {}; activation checkpointing could not be tried: {}", what, pct(facts.used_mb / facts.budget_mb), budget_what, t.error);
    return;
  }
  const double saved = base.mem_peak_mb - t.mem_peak_mb;
  f.status = saved > 0 ? "advice" : "problem";
  if (saved > 0) f.advice = t.overrides;
  f.summary = fmt::format("{} is {} of {}: activation checkpointing of every block saved {:.1f} MB of tensor memory ({}) at {:.2f}x the "
                          "step time (measured)", what, pct(facts.used_mb / facts.budget_mb), budget_what, saved,
                          pct(base.mem_peak_mb > 0 ? saved / base.mem_peak_mb : 0), t.step_ms / std::max(base.step_ms, 1e-9));
}

// Memory: the run's use against the budget, and what activation checkpointing saved where it is close.
DoctorFinding memory_finding(const DoctorFacts& facts, const DoctorExperiments& experiments) {
  const DoctorTrial& base = facts.base;
  DoctorFinding f{"memory", "ok", "", {}, {}, 0, ""};
  if (facts.budget_mb <= 0 || facts.used_mb <= 0) {
    f.status = "not measured";
    f.summary = "memory: the device's memory is not counted here";
    return f;
  }
  const std::string what = facts.on_cuda || facts.budget_gib > 0 ? "peak tensor memory" : "peak process memory (RSS)";
  const std::string budget_what = facts.budget_gib > 0 ? "memory_budget_gib" : facts.on_cuda ? "the GPU's memory" : "available RAM";
  f.evidence.push_back(fmt::format("baseline: {} {:.1f} MB of {:.1f} MB ({}, {}); tensor peak {:.1f} MB", what, facts.used_mb, facts.budget_mb, budget_what,
                                   pct(facts.used_mb / facts.budget_mb), base.mem_peak_mb));
  const double per_sample_mb = memory_per_sample_mb(base, experiments);
  if (per_sample_mb > 0) f.evidence.push_back(fmt::format("each sample of a step adds {:.3g} MB of tensor memory (the 2x batch trial's peak)", per_sample_mb));
  add_held_memory(f, base);
  if (!facts.memory_close) f.summary = memory_headroom_summary(facts, what, budget_what, per_sample_mb);
  else add_checkpointing_result(f, facts, experiments, what, budget_what);
  return f;
}

// Threads: another split of the cores between compute threads and loader workers.
DoctorFinding threads_finding(const DoctorFacts& facts, const DoctorExperiments& experiments) {
  const DoctorTrial& base = facts.base;
  DoctorFinding f{"threads", "ok", "", {}, {}, 0, ""};
  f.evidence.push_back(fmt::format("baseline: {} intra-op thread(s), {} loader worker(s), {} usable core(s)", base.threads, base.workers, facts.cores));
  if (const auto it = experiments.done.find("threads"); it != experiments.done.end()) {
    const DoctorTrial& t = it->second;
    compare_with_baseline(f, base, t);
    if (f.gain >= kMinGain) {
      f.status = "advice";
      f.advice = t.overrides;
      f.summary = fmt::format("{} is {:.2f}x faster than {} thread(s) beside {} worker(s) on {} core(s) (measured)", t.name, f.gain, base.threads, base.workers, facts.cores);
    } else {
      f.summary = fmt::format("{} was not faster ({:.2f}x): keep {} thread(s)", t.name, f.gain, base.threads);
    }
  } else if (experiments.skipped.count("threads")) {
    f.status = "not measured";
    f.summary = "another thread count: " + experiments.not_measured("threads");
  } else if (base.device != "cpu") {
    f.summary = fmt::format("{} intra-op thread(s) and {} worker(s) feed {}: the host threads do not compute the step", base.threads, base.workers, base.device);
  } else if (facts.input_bound) {
    f.summary = "not tried: the run is input-bound; the input finding's trial changed the workers";
  } else {
    f.summary = fmt::format("{} compute thread(s) and {} loader worker(s) use the {} core(s) without oversubscribing them", base.threads, base.workers, facts.cores);
  }
  return f;
}

// The first step: one-time costs against the median step.
DoctorFinding first_step_finding(const DoctorFacts& facts) {
  const DoctorTrial& base = facts.base;
  DoctorFinding f{"first_step", "ok", "", {}, {}, 0, ""};
  const double ratio = base.step_ms > 0 ? base.first_step_ms / base.step_ms : 0;
  f.evidence.push_back(fmt::format("baseline: first step {:.3g} ms, median {:.3g} ms", base.first_step_ms, base.step_ms));
  if (ratio > kSlowFirstStep) {
    f.status = "info";
    f.summary = fmt::format("the first step took {:.1f}x the median step ({:.3g} ms): one-time costs (allocator warm-up, lazy initialisation{}); "
                            "they do not recur, and the trials' step times leave it out", ratio, base.first_step_ms,
                            facts.on_cuda ? ", cuDNN's algorithm search with cudnn_benchmark" : "");
  } else {
    f.summary = fmt::format("the first step took {:.1f}x the median step: no warm-up cost worth noting", ratio);
  }
  return f;
}

std::vector<DoctorFinding> doctor_findings(const config::Config& base_config, const DoctorFacts& facts,
                                           const DoctorExperiments& experiments) {
  return {nonfinite_finding(facts, experiments), input_finding(facts, experiments), precision_finding(facts, experiments),
          overhead_finding(base_config, facts, experiments), memory_finding(facts, experiments), threads_finding(facts, experiments),
          first_step_finding(facts)};
}

}  // namespace bellows::lab::doctor_impl
