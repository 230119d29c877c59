// Learning-rate schedules: linear warmup followed by cosine, linear, step or constant decay (a pure function
// of the optimizer step), and reduce-on-plateau (driven by an evaluation metric). The trainer asks for the
// rate before each optimizer step; skipped steps (non-finite gradients) do not advance a schedule. Each schedule is
// an entry of train/schedule_registry.h, in its own file.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "bellows/util/state_dict.h"  // defines: StateDict

namespace bellows::train {

struct ScheduleOptions {
  std::string type = "cosine";  // a registered schedule: cosine | linear | step | constant | plateau
  // Linear ramp: lr(s) = base_lr * (f + (1 - f) * s / warmup_steps) for s < warmup_steps, f the start
  // factor; lr(0) = f * base_lr and lr(warmup_steps) = base_lr (PyTorch's LinearLR and HF's convention).
  std::int64_t warmup_steps = 0;
  double warmup_start_factor = 0.0;
  std::int64_t total_steps = 0;   // cosine, linear: decay ends here (required > warmup_steps); then flat
  double min_lr_factor = 0.0;     // cosine, linear: final lr = min_lr_factor * base_lr; plateau: the floor
  std::int64_t step_size = 1000;  // step: multiply by gamma every step_size steps after warmup
  double gamma = 0.1;             // step
  // plateau: as PyTorch's ReduceLROnPlateau (threshold_mode "rel", no cooldown): an evaluation improves when
  // it beats the best so far by more than threshold * |best| (below it for mode "min", above for "max"); the
  // rate is multiplied by `factor` at the (patience + 1)-th consecutive evaluation without improvement, never
  // below min_lr_factor * base_lr, and the count restarts. A NaN metric counts as no improvement. Warmup,
  // if any, scales the current rate.
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
  // Pure schedules have no state (an empty dict; loading ignores the dict). Plateau: "lr", "best",
  // "num_bad", "reductions"; a missing entry is a kData error.
  virtual StateDict state_dict() const = 0;
  virtual void load_state_dict(const StateDict& state) = 0;
};

// The registered schedule `options.type` (train/schedule_registry.h).
// kConfig errors, naming the option ("schedule.total_steps") and its value, for unknown types or modes,
// out-of-range values, and inconsistent options (e.g. total_steps <= warmup_steps for cosine).
// Options that the chosen type does not use are not checked.
std::unique_ptr<Schedule> make_schedule(const ScheduleOptions& options, double base_lr);

}  // namespace bellows::train
