// The closed-form schedules: after the warmup, cosine, linear or step decay, or a constant rate. Each is a pure
// function of the optimizer step, so resuming needs no schedule state.
#include <fmt/format.h>

#include <cmath>
#include <numbers>

#include "bellows/train/schedule_registry.h"
#include "bellows/util/check.h"

namespace bellows::train {
namespace {

// The rate `after` optimizer steps past the warmup, from the base rate.
using Decay = double (*)(const ScheduleOptions& o, double base_lr, std::int64_t after);

class ClosedFormSchedule final : public Schedule {
 public:
  ClosedFormSchedule(ScheduleOptions options, double base_lr, Decay decay)
      : o_(std::move(options)), base_lr_(base_lr), decay_(decay) {}

  double lr(std::int64_t step) const override {
    if (step < o_.warmup_steps) return base_lr_ * warmup_factor(o_, step);
    return decay_(o_, base_lr_, step - o_.warmup_steps);
  }
  StateDict state_dict() const override { return {}; }
  void load_state_dict(const StateDict&) override {}

 private:
  ScheduleOptions o_;
  double base_lr_;
  Decay decay_;
};

// How far the decay has come, 0 to 1, over total_steps - warmup_steps.
double decay_progress(const ScheduleOptions& o, std::int64_t after) {
  return std::min(1.0, static_cast<double>(after) / static_cast<double>(o.total_steps - o.warmup_steps));
}

// cosine, linear: the decay ends at total_steps (above warmup_steps) at min_lr_factor of the rate.
void check_decay_to_total_steps(const ScheduleOptions& o) {
  BELLOWS_CHECK_CONFIG(o.min_lr_factor >= 0 && o.min_lr_factor <= 1,
                       fmt::format("schedule.min_lr_factor is {}, expected in [0, 1]", o.min_lr_factor), kScheduleHint);
  BELLOWS_CHECK_CONFIG(o.total_steps > o.warmup_steps,
                       fmt::format("schedule.total_steps is {}, but a {} schedule needs it above schedule.warmup_steps ({})",
                                   o.total_steps, o.type, o.warmup_steps),
                       "set schedule.total_steps to the run's number of optimizer steps");
}

ScheduleEntry closed_form_entry(std::string name, std::string help, int order, Decay decay) {
  ScheduleEntry e;
  e.name = std::move(name);
  e.help = std::move(help);
  e.order = order;
  e.make = [decay](const ScheduleOptions& o, double base_lr) -> std::unique_ptr<Schedule> {
    return std::make_unique<ClosedFormSchedule>(o, base_lr, decay);
  };
  return e;
}

// cosine, linear: the decay ends at total_steps, which 0 lets the run's length set.
ScheduleEntry decay_to_total_steps_entry(std::string name, std::string help, int order, Decay decay) {
  ScheduleEntry e = closed_form_entry(std::move(name), std::move(help), order, decay);
  e.decays_over_total_steps = true;
  e.validate = check_decay_to_total_steps;
  return e;
}

double cosine_decay(const ScheduleOptions& o, double base_lr, std::int64_t after) {
  const double min_lr = o.min_lr_factor * base_lr;
  return min_lr + (base_lr - min_lr) * 0.5 * (1.0 + std::cos(std::numbers::pi * decay_progress(o, after)));
}

double linear_decay(const ScheduleOptions& o, double base_lr, std::int64_t after) {
  const double min_lr = o.min_lr_factor * base_lr;
  return base_lr - (base_lr - min_lr) * decay_progress(o, after);
}

ScheduleEntry step_schedule() {
  ScheduleEntry e = closed_form_entry("step", "lr times gamma every step_size steps", 3,
                                      [](const ScheduleOptions& o, double base_lr, std::int64_t after) {
                                        const std::int64_t decays = after / o.step_size;  // whole periods completed
                                        return base_lr * std::pow(o.gamma, static_cast<double>(decays));
                                      });
  e.validate = [](const ScheduleOptions& o) {
    BELLOWS_CHECK_CONFIG(o.step_size > 0, fmt::format("schedule.step_size is {}, expected > 0", o.step_size), kScheduleHint);
    BELLOWS_CHECK_CONFIG(o.gamma > 0 && o.gamma <= 1, fmt::format("schedule.gamma is {}, expected in (0, 1]", o.gamma),
                         kScheduleHint);
  };
  return e;
}

ScheduleEntry constant_schedule() {
  return closed_form_entry("constant", "lr throughout", 4,
                           [](const ScheduleOptions&, double base_lr, std::int64_t) { return base_lr; });
}

const ScheduleRegistrar kCosineScheduleRegistered(
    decay_to_total_steps_entry("cosine", "half a cosine from lr to min_lr_factor * lr over total_steps", 1, cosine_decay));
const ScheduleRegistrar kLinearScheduleRegistered(
    decay_to_total_steps_entry("linear", "a straight line from lr to min_lr_factor * lr over total_steps", 2, linear_decay));
const ScheduleRegistrar kStepScheduleRegistered(step_schedule());
const ScheduleRegistrar kConstantScheduleRegistered(constant_schedule());

}  // namespace
}  // namespace bellows::train
