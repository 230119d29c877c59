// Learning-rate schedules. The warmup ramp and the decays are closed-form functions of the step, so resuming
// needs no schedule state; only reduce-on-plateau carries state (the best metric and the patience count).
#include "bellows/train/schedule.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <numbers>
#include <vector>

#include "bellows/util/check.h"
#include "bellows/util/suggest.h"

namespace bellows::train {
namespace {

constexpr const char* kScheduleHint = "see the schedule section of the configuration";

// The warmup multiplier: a linear ramp from warmup_start_factor to 1 over warmup_steps, then 1.
double warmup_factor(const ScheduleOptions& o, std::int64_t step) {
  if (step >= o.warmup_steps) return 1.0;
  const double s = static_cast<double>(std::max<std::int64_t>(step, 0));
  return o.warmup_start_factor + (1.0 - o.warmup_start_factor) * s / static_cast<double>(o.warmup_steps);
}

class PureSchedule final : public Schedule {
 public:
  PureSchedule(ScheduleOptions options, double base_lr) : o_(std::move(options)), base_lr_(base_lr) {}

  double lr(std::int64_t step) const override {
    if (step < o_.warmup_steps) return base_lr_ * warmup_factor(o_, step);
    const std::int64_t after = step - o_.warmup_steps;
    const double min_lr = o_.min_lr_factor * base_lr_;
    if (o_.type == "constant") return base_lr_;
    if (o_.type == "step") {
      const std::int64_t decays = after / o_.step_size;  // whole periods completed
      return base_lr_ * std::pow(o_.gamma, static_cast<double>(decays));
    }
    const double progress =
        std::min(1.0, static_cast<double>(after) / static_cast<double>(o_.total_steps - o_.warmup_steps));
    if (o_.type == "linear") return base_lr_ - (base_lr_ - min_lr) * progress;
    return min_lr + (base_lr_ - min_lr) * 0.5 * (1.0 + std::cos(std::numbers::pi * progress));  // cosine
  }

  StateDict state_dict() const override { return {}; }
  void load_state_dict(const StateDict&) override {}

 private:
  ScheduleOptions o_;
  double base_lr_;
};

class PlateauSchedule final : public Schedule {
 public:
  PlateauSchedule(ScheduleOptions options, double base_lr)
      : o_(std::move(options)), base_lr_(base_lr), lr_(base_lr), best_(initial_best()) {}

  double lr(std::int64_t step) const override { return lr_ * warmup_factor(o_, step); }

  void observe_metric(double value) override {
    if (improves(value)) {
      best_ = value;
      num_bad_ = 0;
      return;
    }
    if (++num_bad_ > o_.patience) {
      lr_ = std::max(lr_ * o_.factor, o_.min_lr_factor * base_lr_);
      num_bad_ = 0;
      ++reductions_;
    }
  }

  StateDict state_dict() const override {
    StateDict d;
    put_double(d, "lr", lr_);
    put_double(d, "best", best_);
    put_int(d, "num_bad", num_bad_);
    put_int(d, "reductions", reductions_);
    return d;
  }

  void load_state_dict(const StateDict& state) override {
    const double lr = get_double(state, "lr");
    const double best = get_double(state, "best");
    const std::int64_t num_bad = get_int(state, "num_bad");
    reductions_ = get_int(state, "reductions");
    lr_ = lr;
    best_ = best;
    num_bad_ = num_bad;
  }

 private:
  double initial_best() const {
    return o_.mode == "min" ? std::numeric_limits<double>::infinity() : -std::numeric_limits<double>::infinity();
  }
  bool improves(double value) const {
    if (std::isnan(value)) return false;
    if (std::isinf(best_)) return o_.mode == "min" ? value < best_ : value > best_;
    const double margin = o_.threshold * std::abs(best_);
    return o_.mode == "min" ? value < best_ - margin : value > best_ + margin;
  }

  ScheduleOptions o_;
  double base_lr_;
  double lr_;
  double best_;
  std::int64_t num_bad_ = 0;
  std::int64_t reductions_ = 0;
};

void validate(const ScheduleOptions& o, double base_lr) {
  const std::vector<std::string> types = {"cosine", "linear", "step", "constant", "plateau"};
  if (std::find(types.begin(), types.end(), o.type) == types.end()) {
    const auto best = closest_match(o.type, types);
    BELLOWS_FAIL(ErrorKind::kConfig, fmt::format("schedule.type is '{}', an unknown schedule", o.type),
                 best ? fmt::format("did you mean '{}'? (valid: {})", *best, fmt::join(types, ", "))
                      : fmt::format("use one of: {}", fmt::join(types, ", ")));
  }
  BELLOWS_CHECK_CONFIG(std::isfinite(base_lr) && base_lr >= 0,
                       fmt::format("the base learning rate is {}, expected >= 0", base_lr),
                       "set optim.lr to a non-negative number");
  BELLOWS_CHECK_CONFIG(o.warmup_steps >= 0, fmt::format("schedule.warmup_steps is {}, expected >= 0", o.warmup_steps),
                       kScheduleHint);
  BELLOWS_CHECK_CONFIG(o.warmup_start_factor >= 0 && o.warmup_start_factor <= 1,
                       fmt::format("schedule.warmup_start_factor is {}, expected in [0, 1]", o.warmup_start_factor),
                       kScheduleHint);
  if (o.type == "cosine" || o.type == "linear" || o.type == "plateau") {
    BELLOWS_CHECK_CONFIG(o.min_lr_factor >= 0 && o.min_lr_factor <= 1,
                         fmt::format("schedule.min_lr_factor is {}, expected in [0, 1]", o.min_lr_factor), kScheduleHint);
  }
  if (o.type == "cosine" || o.type == "linear") {
    BELLOWS_CHECK_CONFIG(
        o.total_steps > o.warmup_steps,
        fmt::format("schedule.total_steps is {}, but a {} schedule needs it above schedule.warmup_steps ({})",
                    o.total_steps, o.type, o.warmup_steps),
        "set schedule.total_steps to the run's number of optimizer steps");
  }
  if (o.type == "step") {
    BELLOWS_CHECK_CONFIG(o.step_size > 0, fmt::format("schedule.step_size is {}, expected > 0", o.step_size), kScheduleHint);
    BELLOWS_CHECK_CONFIG(o.gamma > 0 && o.gamma <= 1, fmt::format("schedule.gamma is {}, expected in (0, 1]", o.gamma),
                         kScheduleHint);
  }
  if (o.type == "plateau") {
    BELLOWS_CHECK_CONFIG(o.factor > 0 && o.factor < 1,
                         fmt::format("schedule.factor is {}, expected in (0, 1)", o.factor), kScheduleHint);
    BELLOWS_CHECK_CONFIG(o.patience >= 0, fmt::format("schedule.patience is {}, expected >= 0", o.patience), kScheduleHint);
    BELLOWS_CHECK_CONFIG(o.threshold >= 0 && std::isfinite(o.threshold),
                         fmt::format("schedule.threshold is {}, expected >= 0", o.threshold), kScheduleHint);
    BELLOWS_CHECK_CONFIG(o.mode == "min" || o.mode == "max",
                         fmt::format("schedule.mode is '{}', expected min or max", o.mode),
                         "min for a loss, max for an accuracy");
  }
}

}  // namespace

std::unique_ptr<Schedule> make_schedule(const ScheduleOptions& options, double base_lr) {
  validate(options, base_lr);
  if (options.type == "plateau") return std::make_unique<PlateauSchedule>(options, base_lr);
  return std::make_unique<PureSchedule>(options, base_lr);
}

}  // namespace bellows::train
