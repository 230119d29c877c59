// The schedule registry (the seventh seam): each learning-rate schedule registers a ScheduleEntry from its own file
// (src/train/decay_schedules.cpp, src/train/plateau_schedule.cpp), like a sink or a model. make_schedule (schedule.h)
// checks what every schedule shares (warmup, the base rate), then the entry's own options, and builds it; app/
// offers the entries' names as schedule.type's choices and the trainer asks an entry, not a name, whether the run's
// length sets its total_steps. Adding one is one file and one registration line (docs/architecture.md).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "bellows/train/schedule.h"  // defines: Schedule, ScheduleOptions

namespace bellows::train {

struct ScheduleEntry {
  std::string name;  // schedule.type: cosine
  std::string help;
  int order = 0;  // its place among schedule.type's choices and in errors that list them
  // It decays over schedule.total_steps, which 0 lets the trainer set to the run's optimizer steps (and online
  // training, which has no planned end, must be given).
  bool decays_over_total_steps = false;
  // Its own options' checks (kConfig errors naming the key and value); the shared ones ran before.
  std::function<void(const ScheduleOptions&)> validate;
  std::function<std::unique_ptr<Schedule>(const ScheduleOptions&, double base_lr)> make;
};

std::vector<ScheduleEntry> schedule_entries();  // in `order`
std::vector<std::string> schedule_names();      // in `order`
// The entry of `name`; kConfig error "schedule.type is '<name>', an unknown schedule" with the closest name.
const ScheduleEntry& find_schedule(const std::string& name);
// Registration, one static object per schedule (in its own file):
//   const bellows::train::ScheduleRegistrar kMineScheduleRegistered(mine_schedule());
void register_schedule(ScheduleEntry entry);  // kInternal error on a duplicate name
struct ScheduleRegistrar {
  explicit ScheduleRegistrar(ScheduleEntry entry) { register_schedule(std::move(entry)); }
};

// The warmup multiplier every schedule applies: a linear ramp from warmup_start_factor to 1 over warmup_steps, then 1.
double warmup_factor(const ScheduleOptions& options, std::int64_t step);
// The hint of the schedules' option errors.
inline constexpr const char* kScheduleHint = "see the schedule section of the configuration";

}  // namespace bellows::train
