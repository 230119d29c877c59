// Private to `bellows doctor` (lab/doctor.h): what doctor.cpp (the baseline, the experiments it calls for, their
// trials) hands to doctor_findings.cpp (a finding per check), and the few phrasings both write.
#pragma once

#include <fmt/format.h>

#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "bellows/config/config.h"       // defines: Config
#include "bellows/hw/hardware_info.h"    // defines: HardwareInfo
#include "bellows/lab/doctor.h"          // defines: DoctorTrial, DoctorFinding
#include "bellows/lab/trial.h"           // defines: format_rate, step_total, data_fraction
#include "bellows/obs/phase_clock.h"     // defines: Phase
#include "bellows/plan/plan.h"           // defines: Plan

namespace bellows::lab::doctor_impl {

constexpr std::size_t kData = static_cast<std::size_t>(obs::Phase::kData);

inline std::string rate(double per_s) { return format_rate(per_s); }

inline std::string pct(double fraction) { return fmt::format("{:.1f}%", 100 * fraction); }

// A trial's speed-up over the baseline (samples/s); 0 for a trial that failed or trained too few steps.
inline double gain(const DoctorTrial& base, const DoctorTrial& t) {
  return base.samples_per_s > 0 && t.error.empty() && t.steps >= 3 ? t.samples_per_s / base.samples_per_s : 0;
}

inline std::string trial_line(const DoctorTrial& t) {
  return fmt::format("{}: {} steps in {:.1f} s, median {:.3g} ms/step (spread {}), {} samples/s", t.name, t.steps, t.fit_seconds,
                     t.step_ms, pct(t.step_spread), rate(t.samples_per_s));
}

// What the baseline trial says, read once after it: the experiments it calls for and the findings are decided on it.
struct DoctorFacts {
  const DoctorTrial& base;
  const hw::HardwareInfo& hw;
  int cores = 1;                    // usable cores
  bool nonfinite = false;           // a non-finite training loss, or a step skipped on non-finite gradients
  std::int64_t first_bad_step = 0;  // the first optimizer step with a non-finite loss; 0: none
  bool input_bound = false;         // waiting for data above kInputBoundFraction of the step
  // Precision: the plan's `auto` choice here, and the precision to try against the running one.
  plan::Plan auto_plan{};
  std::string auto_reason{};
  bool full_precision = false;
  std::string other_precision{};
  // The batch: chosen by the finder (data.batch_size: auto), or the configured micro-batch and accumulation.
  bool batch_auto = false;
  std::int64_t batch = 0, accumulation = 0;
  // Memory: the budget a step may use, and the run's use against it.
  double budget_gib = 0;
  bool on_cuda = false;
  double budget_mb = 0, used_mb = 0;
  bool memory_close = false;
};

// The experiments' outcome: each measured trial by experiment id, and why the others were not measured.
struct DoctorExperiments {
  std::map<std::string, DoctorTrial> done;
  std::map<std::string, std::string> skipped;  // id -> why not measured

  std::string not_measured(const std::string& id) const {
    const auto it = skipped.find(id);
    return it != skipped.end() ? it->second : std::string("not measured");
  }
};

// The findings, one per check in the report's order: nonfinite, input, precision, overhead, memory, threads,
// first_step. Defined in doctor_findings.cpp.
std::vector<DoctorFinding> doctor_findings(const config::Config& base_config, const DoctorFacts& facts,
                                           const DoctorExperiments& experiments);

}  // namespace bellows::lab::doctor_impl
