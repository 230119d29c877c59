// Learning-rate schedules at known steps (warmup endpoints, cosine midpoint, linear end, step boundaries),
// reduce-on-plateau with patience and floor, its state round trip, and validation errors naming the option.
#include "bellows/train/schedule.h"

#include <gtest/gtest.h>

#include <cmath>
#include <numbers>

#include "bellows/util/error.h"

namespace bellows::train {
namespace {

ScheduleOptions opts(const std::string& type) {
  ScheduleOptions o;
  o.type = type;
  return o;
}

TEST(Schedule, CosineWithWarmup) {
  auto o = opts("cosine");
  o.warmup_steps = 10;
  o.warmup_start_factor = 0.1;
  o.total_steps = 110;
  o.min_lr_factor = 0.1;
  const auto s = make_schedule(o, 1e-3);
  EXPECT_DOUBLE_EQ(s->lr(0), 1e-4);                      // warmup start
  EXPECT_DOUBLE_EQ(s->lr(5), 1e-3 * (0.1 + 0.9 * 0.5));  // halfway up
  EXPECT_DOUBLE_EQ(s->lr(10), 1e-3);                     // warmup end = decay start
  EXPECT_DOUBLE_EQ(s->lr(35), 1e-4 + 9e-4 * 0.5 * (1 + std::cos(std::numbers::pi / 4)));
  EXPECT_DOUBLE_EQ(s->lr(60), 1e-4 + 9e-4 * 0.5);  // midpoint of the decay
  EXPECT_NEAR(s->lr(110), 1e-4, 1e-18);            // the floor at total_steps ...
  EXPECT_NEAR(s->lr(500), 1e-4, 1e-18);            // ... and after it
  EXPECT_GT(s->lr(11), s->lr(12));
}

TEST(Schedule, IsAPureFunctionOfTheStep) {
  auto o = opts("cosine");
  o.total_steps = 100;
  const auto a = make_schedule(o, 0.1);
  const double at_60 = a->lr(60);
  for (std::int64_t step : {99, 3, 0, 77}) a->lr(step);
  a->observe_metric(1.0);
  EXPECT_EQ(a->lr(60), at_60);
  EXPECT_EQ(make_schedule(o, 0.1)->lr(60), at_60);
  EXPECT_TRUE(a->state_dict().empty());
}

TEST(Schedule, LinearDecay) {
  auto o = opts("linear");
  o.total_steps = 100;
  const auto s = make_schedule(o, 1.0);
  EXPECT_DOUBLE_EQ(s->lr(0), 1.0);
  EXPECT_DOUBLE_EQ(s->lr(50), 0.5);
  EXPECT_DOUBLE_EQ(s->lr(75), 0.25);
  EXPECT_DOUBLE_EQ(s->lr(100), 0.0);
  EXPECT_DOUBLE_EQ(s->lr(150), 0.0);
  o.min_lr_factor = 0.2;
  o.warmup_steps = 20;  // decay over steps 20..100
  const auto w = make_schedule(o, 1.0);
  EXPECT_DOUBLE_EQ(w->lr(0), 0.0);
  EXPECT_DOUBLE_EQ(w->lr(20), 1.0);
  EXPECT_DOUBLE_EQ(w->lr(60), 0.6);
  EXPECT_DOUBLE_EQ(w->lr(100), 0.2);
}

TEST(Schedule, StepDecayBoundaries) {
  auto o = opts("step");
  o.warmup_steps = 5;
  o.warmup_start_factor = 0.5;
  o.step_size = 10;
  o.gamma = 0.5;
  const auto s = make_schedule(o, 1.0);
  EXPECT_DOUBLE_EQ(s->lr(0), 0.5);
  EXPECT_DOUBLE_EQ(s->lr(5), 1.0);
  EXPECT_DOUBLE_EQ(s->lr(14), 1.0);
  EXPECT_DOUBLE_EQ(s->lr(15), 0.5);
  EXPECT_DOUBLE_EQ(s->lr(24), 0.5);
  EXPECT_DOUBLE_EQ(s->lr(25), 0.25);
}

TEST(Schedule, ConstantAfterWarmup) {
  auto o = opts("constant");
  o.warmup_steps = 4;
  const auto s = make_schedule(o, 2.0);
  EXPECT_DOUBLE_EQ(s->lr(0), 0.0);
  EXPECT_DOUBLE_EQ(s->lr(2), 1.0);
  EXPECT_DOUBLE_EQ(s->lr(4), 2.0);
  EXPECT_DOUBLE_EQ(s->lr(100000), 2.0);
  EXPECT_DOUBLE_EQ(make_schedule(opts("constant"), 2.0)->lr(0), 2.0) << "no warmup: the base rate from step 0";
}

ScheduleOptions plateau_options() {
  auto o = opts("plateau");
  o.factor = 0.5;
  o.patience = 2;
  o.threshold = 0.1;
  o.min_lr_factor = 0.2;
  return o;
}

TEST(Schedule, PlateauReducesAfterPatienceAndStopsAtFloor) {
  const auto s = make_schedule(plateau_options(), 1.0);
  EXPECT_DOUBLE_EQ(s->lr(0), 1.0);
  s->observe_metric(1.0);   // first value: improves on +inf
  s->observe_metric(0.95);  // better, but by less than 10%: bad 1
  s->observe_metric(0.92);  // bad 2 (= patience: not yet)
  EXPECT_DOUBLE_EQ(s->lr(7), 1.0);
  s->observe_metric(0.91);  // bad 3 > patience: reduce
  EXPECT_DOUBLE_EQ(s->lr(7), 0.5);
  s->observe_metric(0.5);  // a real improvement resets the count
  s->observe_metric(0.6);
  s->observe_metric(0.6);
  EXPECT_DOUBLE_EQ(s->lr(7), 0.5);
  s->observe_metric(std::nan(""));  // NaN: no improvement
  EXPECT_DOUBLE_EQ(s->lr(7), 0.25);
  for (int i = 0; i < 3; ++i) s->observe_metric(0.6);
  EXPECT_DOUBLE_EQ(s->lr(7), 0.2) << "0.125 is below the floor min_lr_factor * base_lr";
  for (int i = 0; i < 3; ++i) s->observe_metric(0.6);
  EXPECT_DOUBLE_EQ(s->lr(7), 0.2);
}

TEST(Schedule, PlateauMaxModeAndWarmup) {
  auto o = plateau_options();
  o.mode = "max";
  o.patience = 0;
  o.warmup_steps = 10;
  const auto s = make_schedule(o, 1.0);
  EXPECT_DOUBLE_EQ(s->lr(0), 0.0);
  EXPECT_DOUBLE_EQ(s->lr(5), 0.5);
  s->observe_metric(0.5);
  s->observe_metric(0.6);  // +20%: improves in max mode
  EXPECT_DOUBLE_EQ(s->lr(10), 1.0);
  s->observe_metric(0.4);  // worse, patience 0: reduce at once
  EXPECT_DOUBLE_EQ(s->lr(10), 0.5);
  EXPECT_DOUBLE_EQ(s->lr(5), 0.25) << "warmup scales the current rate";
}

TEST(Schedule, PlateauStateRoundTrip) {
  const auto a = make_schedule(plateau_options(), 1.0);
  for (double v : {1.0, 0.99, 0.99, 0.99, 0.98}) a->observe_metric(v);  // one reduction, then bad 1
  ASSERT_DOUBLE_EQ(a->lr(0), 0.5);
  const auto b = make_schedule(plateau_options(), 1.0);
  b->load_state_dict(a->state_dict());
  EXPECT_DOUBLE_EQ(b->lr(0), 0.5);
  a->observe_metric(0.98);
  b->observe_metric(0.98);
  EXPECT_DOUBLE_EQ(b->lr(0), a->lr(0));
  a->observe_metric(0.98);  // bad 3 for both: reduce
  b->observe_metric(0.98);
  EXPECT_DOUBLE_EQ(a->lr(0), 0.25);
  EXPECT_DOUBLE_EQ(b->lr(0), 0.25);
  StateDict missing = a->state_dict();
  missing.erase("best");
  try {
    b->load_state_dict(missing);
    ADD_FAILURE() << "no error for a missing entry";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kData);
    EXPECT_NE(e.message().find("'best'"), std::string::npos) << e.message();
  }
}

void expect_schedule_config_error(const ScheduleOptions& o, const std::string& needle, double base_lr = 1e-3) {
  try {
    make_schedule(o, base_lr);
    ADD_FAILURE() << "no error for " << needle;
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kConfig) << e.what();
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
  }
}

TEST(Schedule, ValidationErrorsNameOptionAndValue) {
  expect_schedule_config_error(opts("cosin"), "did you mean 'cosine'");
  auto o = opts("cosine");
  o.warmup_steps = 10;
  o.total_steps = 10;
  expect_schedule_config_error(o, "schedule.total_steps is 10");
  o = opts("linear");  // total_steps left at 0
  expect_schedule_config_error(o, "schedule.total_steps is 0");
  o = opts("step");
  o.step_size = 0;
  expect_schedule_config_error(o, "schedule.step_size is 0");
  o = opts("constant");
  o.warmup_start_factor = 2;
  expect_schedule_config_error(o, "schedule.warmup_start_factor is 2");
  o = opts("constant");
  o.warmup_steps = -1;
  expect_schedule_config_error(o, "schedule.warmup_steps is -1");
  o = plateau_options();
  o.mode = "mid";
  expect_schedule_config_error(o, "schedule.mode is 'mid'");
  o = plateau_options();
  o.factor = 1.5;
  expect_schedule_config_error(o, "schedule.factor is 1.5");
  expect_schedule_config_error(opts("constant"), "base learning rate is -1", -1.0);
  EXPECT_NO_THROW(make_schedule(opts("constant"), 1e-3)) << "options a type does not use are not checked";
}

}  // namespace
}  // namespace bellows::train
