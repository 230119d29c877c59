// `bellows doctor`: short measured trials of a configured run, and a diagnosis in which every piece of advice was
// measured on this machine in this call (or says "not measured" and why). The seeds' troubleshooting loop
// (watch the utilisation, guess the bottleneck, change a flag, try again: seeds 001, 003, 004) done by the tool.
//
// The baseline trial trains the configured run (checkpoints, TensorBoard and evaluation off, a record every
// step, in a temporary directory) for a share of the budget; its step-time breakdown, memory and losses decide
// which experiments follow, each a trial with one change:
//  - input-bound (waiting for data above kInputBoundFraction of the step): the workers that would hide the
//    measured fetch time, with a deeper prefetch;
//  - a cheaper precision than the one running, where the plan's `auto` would pick one (AVX512_BF16/AMX CPUs,
//    tensor-core GPUs): its speed-up and how far its losses moved over the same steps;
//  - overhead: twice the batch (with half the accumulation when accumulating, so the effective batch stays);
//  - threads: compute threads and loader workers that together oversubscribe the cores, or leave some idle;
//  - memory close to the budget: activation checkpointing of every block, with the measured saving;
//  - non-finite losses or skipped steps: a trial with train.detect_anomaly naming the first non-finite tensor.
// A change is advised only when its trial was at least kMinGain times faster than the baseline.
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "bellows/lab/trial.h"      // defines: Trial
#include "bellows/config/config.h"  // defines: Config

namespace bellows::lab {

inline constexpr double kInputBoundFraction = 0.10;  // waiting for data above this share of the step time
inline constexpr double kMinGain = 1.05;             // a measured speed-up below this is not advised
inline constexpr double kOverheadGain = 1.25;        // 2x batch giving this much more samples/s: overhead-bound
inline constexpr double kMemoryCloseFraction = 0.80; // peak memory above this share of the budget
inline constexpr double kSlowFirstStep = 3.0;        // first step this many times the median step

struct DoctorOptions {
  double budget_s = 60;                          // all trials together, setup included (roughly: a trial ends at a step)
  std::FILE* progress = stderr;                  // a line per trial; nullptr: quiet
  const std::atomic<bool>* stop_flag = nullptr;  // set: the running trial stops at its next step, no more start
};

// The doctor's trials are lab::Trial (trial.h): the diagnosed config with one change.
using DoctorTrial = Trial;

struct DoctorFinding {
  std::string id;        // input | precision | overhead | memory | threads | nonfinite | first_step
  std::string status;    // ok | advice | problem | info | not measured
  std::string summary;   // one sentence with the numbers
  std::vector<std::string> evidence;   // measurements behind it, one per line
  std::vector<std::string> advice;     // key=value settings to use (only with status advice)
  double gain = 0;       // measured speed-up of the advice (samples/s ratio); 0: none
  std::string trial;     // the trial that measured it ("" baseline only)
};

struct DoctorReport {
  std::string config_name;
  std::string machine;     // one line: CPU, cores, GPU
  double budget_s = 0, seconds = 0;
  std::vector<DoctorTrial> trials;
  std::vector<DoctorFinding> findings;

  const DoctorFinding* find(const std::string& id) const;
  const DoctorTrial* trial(const std::string& name) const;
  nlohmann::json to_json() const;
  std::string to_text() const;
};

// Runs the trials and diagnoses. kConfig errors of the config itself propagate (as `bellows train` would fail);
// a trial that fails otherwise is reported in its finding.
DoctorReport doctor(const config::Config& config, const DoctorOptions& options = {});

}  // namespace bellows::lab
