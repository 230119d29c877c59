// Learning-rate schedules: the registry, the checks every schedule shares, and make_schedule. The schedules
// themselves are entries in their own files (decay_schedules.cpp, plateau_schedule.cpp).
#include "bellows/train/schedule.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "bellows/train/schedule_registry.h"
#include "bellows/util/check.h"
#include "bellows/util/registry.h"

namespace bellows::train {

void register_schedule(ScheduleEntry entry) { registry_of<ScheduleEntry>("schedule").add(std::move(entry)); }
std::vector<ScheduleEntry> schedule_entries() { return in_order(registry_of<ScheduleEntry>("schedule").all()); }

std::vector<std::string> schedule_names() { return names_of(schedule_entries()); }

const ScheduleEntry& find_schedule(const std::string& name) {
  const std::vector<std::string> names = schedule_names();
  BELLOWS_CHECK_CONFIG(std::find(names.begin(), names.end(), name) != names.end(),
                       fmt::format("schedule.type is '{}', an unknown schedule", name), suggestion_hint(name, names));
  return registry_of<ScheduleEntry>("schedule").find(name);
}

double warmup_factor(const ScheduleOptions& o, std::int64_t step) {
  if (step >= o.warmup_steps) return 1.0;
  const double s = static_cast<double>(std::max<std::int64_t>(step, 0));
  return o.warmup_start_factor + (1.0 - o.warmup_start_factor) * s / static_cast<double>(o.warmup_steps);
}

std::unique_ptr<Schedule> make_schedule(const ScheduleOptions& o, double base_lr) {
  const ScheduleEntry& entry = find_schedule(o.type);
  BELLOWS_CHECK_CONFIG(std::isfinite(base_lr) && base_lr >= 0,
                       fmt::format("the base learning rate is {}, expected >= 0", base_lr),
                       "set optim.lr to a non-negative number");
  BELLOWS_CHECK_CONFIG(o.warmup_steps >= 0, fmt::format("schedule.warmup_steps is {}, expected >= 0", o.warmup_steps),
                       kScheduleHint);
  BELLOWS_CHECK_CONFIG(o.warmup_start_factor >= 0 && o.warmup_start_factor <= 1,
                       fmt::format("schedule.warmup_start_factor is {}, expected in [0, 1]", o.warmup_start_factor),
                       kScheduleHint);
  if (entry.validate) entry.validate(o);
  return entry.make(o, base_lr);
}

}  // namespace bellows::train
