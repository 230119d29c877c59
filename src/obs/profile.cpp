// Profiler traces of training steps; see profile.h.
#include "bellows/obs/profile.h"

#include <ATen/Context.h>
#include <fmt/format.h>
#include <torch/csrc/autograd/profiler_kineto.h>

#include "bellows/util/atomic_file.h"  // defines: write_file_atomically_via
#include "bellows/util/check.h"

namespace bellows::obs {

namespace prof = torch::autograd::profiler;
using torch::profiler::impl::ActivityType;

StepProfiler::StepProfiler(ProfileOptions options) : options_(std::move(options)) {
  if (!options_.enabled) return;
  BELLOWS_CHECK_CONFIG(options_.steps >= 1, fmt::format("profile.steps is {}, expected >= 1", options_.steps), "trace at least one step");
  BELLOWS_CHECK_CONFIG(options_.start_step >= 0, fmt::format("profile.start_step is {}, expected >= 0", options_.start_step),
                       "set profile.start_step to the steps to skip before tracing");
  BELLOWS_CHECK_CONFIG(!options_.path.empty(), "profile: no trace file given", "set the trace path (bellows train writes <run dir>/trace.json)");
}

StepProfiler::~StepProfiler() {
  if (!active_) return;
  try {
    prof::disableProfiler();
  } catch (...) {  // a destructor must not throw; the trace is dropped
  }
}

void StepProfiler::before_step(std::int64_t steps_taken) {
  if (!options_.enabled || active_ || written_ || steps_taken != options_.start_step) return;
  std::set<ActivityType> activities = {ActivityType::CPU};
  if (at::hasCUDA()) activities.insert(ActivityType::CUDA);
  const torch::profiler::impl::ProfilerConfig config(torch::profiler::impl::ProfilerState::KINETO, options_.record_shapes,
                                                     options_.profile_memory, /*with_stack=*/false, /*with_flops=*/true,
                                                     /*with_modules=*/false);
  try {
    prof::prepareProfiler(config, activities);
    prof::enableProfiler(config, activities);
  } catch (const c10::Error& e) {
    BELLOWS_FAIL(ErrorKind::kResource, fmt::format("profile: the Kineto profiler did not start: {}", e.what_without_backtrace()),
                 "turn profile.enabled off, or use a LibTorch build with Kineto (the PyPI wheels have it)");
  }
  active_ = true;
}

bool StepProfiler::after_step(std::int64_t steps_taken) {
  if (!active_ || steps_taken < options_.start_step + options_.steps) return false;
  stop_and_write();
  return true;
}

bool StepProfiler::finish() {
  if (!active_) return false;
  stop_and_write();
  return true;
}

void StepProfiler::stop_and_write() {
  active_ = false;
  std::unique_ptr<prof::ProfilerResult> result = prof::disableProfiler();
  std::filesystem::create_directories(options_.path.parent_path().empty() ? "." : options_.path.parent_path());
  // Kineto saves only to a path: it gets the temporary one beside the trace, which is then fsynced and renamed.
  write_file_atomically_via(options_.path, [&](const std::filesystem::path& tmp) {
    result->save(tmp.string());
    BELLOWS_CHECK_RESOURCE(std::filesystem::exists(tmp),
                           fmt::format("profile: the trace was not written to {}", tmp.string()),
                           "check that the run directory is writable");
  });
  written_ = true;
}

}  // namespace bellows::obs
