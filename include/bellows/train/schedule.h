// Learning-rate schedules: linear warmup followed by cosine, linear, step or constant decay (a pure function
// of the optimizer step), and reduce-on-plateau (driven by an evaluation metric). The trainer asks for the
// rate before each optimizer step; skipped steps (non-finite gradients) do not advance a schedule.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "bellows/util/state_dict.h"  // defines: StateDict

namespace bellows::train {

struct ScheduleOptions {
  std::string type = "cosine";       // cosine | linear | step | constant | plateau
  std::int64_t warmup_steps = 0;     // linear ramp from warmup_start_factor * base_lr to base_lr
  double warmup_start_factor = 0.0;
  std::int64_t total_steps = 0;      // cosine, linear: decay ends here (required > warmup_steps)
  double min_lr_factor = 0.0;        // cosine, linear: final lr = min_lr_factor * base_lr
  std::int64_t step_size = 1000;     // step: multiply by gamma every step_size steps after warmup
  double gamma = 0.1;                // step
  // plateau: multiply by `factor` after `patience` evaluations without improvement beyond `threshold`
  // (relative), never below min_lr_factor * base_lr; mode "min" or "max".
  double factor = 0.1;
  std::int64_t patience = 10;
  double threshold = 1e-4;
  std::string mode = "min";
};

class Schedule {
 public:
  virtual ~Schedule() = default;
  // Learning rate for optimizer step `step` (0-based count of steps taken so far).
  virtual double lr(std::int64_t step) const = 0;
  // Plateau schedules react to evaluation results; others ignore them.
  virtual void observe_metric(double value) {}
  virtual StateDict state_dict() const = 0;
  virtual void load_state_dict(const StateDict& state) = 0;
};

// kConfig errors for unknown types or inconsistent options (e.g. total_steps <= warmup_steps for cosine).
std::unique_ptr<Schedule> make_schedule(const ScheduleOptions& options, double base_lr);

}  // namespace bellows::train
