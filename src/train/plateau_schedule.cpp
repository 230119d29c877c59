// Reduce-on-plateau: the rate falls when the evaluations stop improving; it carries state (the rate, the best metric
// and the patience count) into checkpoints.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>

#include "bellows/train/schedule_registry.h"
#include "bellows/util/check.h"

namespace bellows::train {
namespace {

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

void check_plateau_options(const ScheduleOptions& o) {
  BELLOWS_CHECK_CONFIG(o.min_lr_factor >= 0 && o.min_lr_factor <= 1,
                       fmt::format("schedule.min_lr_factor is {}, expected in [0, 1]", o.min_lr_factor), kScheduleHint);
  BELLOWS_CHECK_CONFIG(o.factor > 0 && o.factor < 1, fmt::format("schedule.factor is {}, expected in (0, 1)", o.factor),
                       kScheduleHint);
  BELLOWS_CHECK_CONFIG(o.patience >= 0, fmt::format("schedule.patience is {}, expected >= 0", o.patience), kScheduleHint);
  BELLOWS_CHECK_CONFIG(o.threshold >= 0 && std::isfinite(o.threshold),
                       fmt::format("schedule.threshold is {}, expected >= 0", o.threshold), kScheduleHint);
  BELLOWS_CHECK_CONFIG(o.mode == "min" || o.mode == "max", fmt::format("schedule.mode is '{}', expected min or max", o.mode),
                       "min for a loss, max for an accuracy");
}

std::unique_ptr<Schedule> make_plateau_schedule(const ScheduleOptions& o, double base_lr) {
  return std::make_unique<PlateauSchedule>(o, base_lr);
}

const ScheduleRegistrar kPlateauScheduleRegistered(ScheduleEntry{
    .name = "plateau",
    .help = "lr times factor after patience evaluations without improvement",
    .order = 5,
    .decays_over_total_steps = false,
    .validate = check_plateau_options,
    .make = make_plateau_schedule,
});

}  // namespace
}  // namespace bellows::train
