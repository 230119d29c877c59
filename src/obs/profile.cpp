// Profiler traces of training steps; see profile.h.
#include "bellows/obs/profile.h"

#include <ATen/Context.h>
#include <fmt/format.h>
#include <torch/csrc/autograd/profiler_kineto.h>

#include <algorithm>
#include <cstdlib>
#include <atomic>
#include <map>
#include <mutex>

#include "bellows/util/atomic_file.h"  // defines: write_file_atomically_via
#include "bellows/util/check.h"
#include "obs/internal/op_flops.h"        // defines: uncounted_op_flops

namespace bellows::obs {

namespace prof = torch::autograd::profiler;
using torch::profiler::impl::ActivityType;

namespace {
std::atomic<bool> flop_counter_running{false};  // one count in the process at a time (trainers on several threads)

// While FLOPs are counted: LibTorch's profiler warns per operator call whose arguments it could not keep or read
// ("Failed to save extra arguments for flops computation of op aten::conv2d, input[0] must be a tensor"; "Failed to
// compute flops for op aten::conv2d because it requires padding, stride, and dilation values" for padding="same"),
// up to dozens of lines per counted step. Those ops are counted by bellows' formulas (op_flops.cpp) or through the
// ops they run; the lines are dropped, every other warning goes to the handler that was there before.
class FlopWarningFilter final : public c10::WarningHandler {
 public:
  void process(const c10::Warning& warning) override {
    const std::string& msg = warning.msg();
    if (msg.rfind("Failed to save extra arguments for flops computation", 0) == 0 || msg.rfind("Failed to compute flops for op", 0) == 0) return;
    if (previous) previous->process(warning);
  }
  c10::WarningHandler* previous = nullptr;
};
FlopWarningFilter flop_warning_filter;  // installed by FlopCounter::start, removed by stop (one count at a time)

void filter_flop_warnings(bool on) {
  if (on) {
    flop_warning_filter.previous = c10::WarningUtils::get_warning_handler();
    c10::WarningUtils::set_warning_handler(&flop_warning_filter);
  } else if (c10::WarningUtils::get_warning_handler() == &flop_warning_filter) {
    c10::WarningUtils::set_warning_handler(flop_warning_filter.previous);
  }
}

// Kineto logs every profiler start and stop to stderr ("USDT: ... profiler_start", and on a machine without a GPU
// "ERROR: ... gpuGetDeviceCount failed"): noise in every run that counts FLOPs. Its level 6 keeps it quiet; a
// KINETO_LOG_LEVEL the user set is left as it is.
void quiet_kineto() { ::setenv("KINETO_LOG_LEVEL", "6", /*overwrite=*/0); }

// Starts LibTorch's Kineto profiler with FLOP counting, on the CPU (and CUDA when asked); c10::Error when it cannot.
void enable_kineto(bool record_shapes, bool profile_memory, bool cuda) {
  quiet_kineto();
  std::set<ActivityType> activities = {ActivityType::CPU};
  if (cuda) activities.insert(ActivityType::CUDA);
  const torch::profiler::impl::ProfilerConfig config(torch::profiler::impl::ProfilerState::KINETO, record_shapes, profile_memory,
                                                     /*with_stack=*/false, /*with_flops=*/true, /*with_modules=*/false);
  prof::prepareProfiler(config, activities);
  prof::enableProfiler(config, activities);
}
}  // namespace

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
  try {
    enable_kineto(options_.record_shapes, options_.profile_memory, at::hasCUDA());
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
  std::vector<TracedEvent> events;
  for (const auto& e : result->events()) {
    if (e.endNs() <= e.startNs()) continue;
    const bool device = e.deviceType() != c10::DeviceType::CPU;
    events.push_back(TracedEvent{e.name(), device ? static_cast<std::uint64_t>(e.deviceResourceId()) : e.startThreadId(),
                                 e.startNs(), e.endNs(), device});
  }
  top_operators_ = top_operators_table(events);
}



FlopCounter::~FlopCounter() {
  if (!active_) return;
  try {
    prof::disableProfiler();
  } catch (...) {
  }
  filter_flop_warnings(false);
  flop_counter_running = false;
}

bool FlopCounter::start() {
  if (active_ || prof::isProfilerEnabledInMainThread() || flop_counter_running.exchange(true)) return false;
  try {
    enable_kineto(/*record_shapes=*/true, /*profile_memory=*/false, /*cuda=*/false);
  } catch (const c10::Error&) {
    flop_counter_running = false;
    return false;  // no Kineto in this LibTorch, or a profiler already on: nothing counted
  }
  filter_flop_warnings(true);
  active_ = true;
  return true;
}

void FlopCounter::initialise_on_this_thread() {
  static std::once_flag once;
  std::call_once(once, [] {
    FlopCounter empty;
    if (empty.start()) empty.stop();
  });
}

double FlopCounter::stop() {
  if (!active_) return 0;
  active_ = false;
  const std::unique_ptr<prof::ProfilerResult> result = prof::disableProfiler();
  flop_counter_running = false;
  // The profiler computes an event's count when it is read (KinetoEvent::flops), and warns then: the filter stays
  // until the events are read.
  struct Unfilter {
    ~Unfilter() { filter_flop_warnings(false); }
  } unfilter;
  // An op with a count may run others with counts (under bf16 autocast on the CPU, addmm runs a matrix product
  // inside: counting both doubled the forward's FLOPs, measured on the demo). Only the outermost counted op of each
  // nest counts: per thread, in start order, an op inside the last one counted is skipped.
  struct Counted {
    std::uint64_t start, end;
    double flops;
  };
  std::map<std::uint64_t, std::vector<Counted>> by_thread;
  for (const auto& e : result->events()) {
    if (e.deviceType() != c10::DeviceType::CPU) continue;
    // The profiler's own count where it has one; else bellows' formula for the op (a Conv1d, any convolution's
    // backward, a fused attention kernel), from the shapes and arguments it recorded.
    double flops = static_cast<double>(e.flops());
    if (flops == 0 && e.hasShapes()) {
      flops = internal::uncounted_op_flops(e.name(), e.shapes(), e.hasConcreteInputs() ? e.concreteInputs() : c10::ArrayRef<c10::IValue>());
    }
    if (flops > 0) by_thread[e.startThreadId()].push_back({e.startNs(), e.endNs(), flops});
  }
  double flops = 0;
  for (auto& [thread, ops] : by_thread) {
    std::sort(ops.begin(), ops.end(), [](const Counted& a, const Counted& b) { return a.start != b.start ? a.start < b.start : a.end > b.end; });
    std::uint64_t open_until = 0;
    for (const Counted& op : ops) {
      if (op.start < open_until) continue;  // nested in a counted op
      flops += op.flops;
      open_until = op.end;
    }
  }
  return flops;
}

namespace {

struct OperatorTotals {
  std::int64_t calls = 0;
  double total_us = 0, self_us = 0;
};

std::string operator_rows(const std::map<std::string, OperatorTotals>& totals, std::size_t top, const char* title, bool device) {
  std::vector<std::pair<std::string, OperatorTotals>> rows(totals.begin(), totals.end());
  double all_self = 0;
  for (const auto& [name, t] : rows) all_self += t.self_us;
  std::sort(rows.begin(), rows.end(), [](const auto& a, const auto& b) { return a.second.self_us > b.second.self_us; });
  std::string out = fmt::format("{}\n  {:<44} {:>7} {:>12} {:>12} {:>7}\n", title, device ? "kernel" : "operator", "calls",
                                device ? "time ms" : "total ms", device ? "" : "self ms", "share");
  for (std::size_t i = 0; i < rows.size() && i < top; ++i) {
    const auto& [name, t] = rows[i];
    std::string shown = name;  // cut to the column (resize and append: GCC 12's -Warray-bounds misreads substr + "...")
    if (shown.size() > 44) {
      shown.resize(41);
      shown += "...";
    }
    out += fmt::format("  {:<44} {:>7} {:>12.3f} {:>12} {:>6.1f}%\n", shown, t.calls, t.total_us / 1e3,
                       device ? std::string() : fmt::format("{:.3f}", t.self_us / 1e3), all_self > 0 ? 100 * t.self_us / all_self : 0.0);
  }
  return out;
}

}  // namespace

std::string top_operators_table(const std::vector<TracedEvent>& events, std::size_t top) {
  // Per thread, in start order (the longer first on ties): a stack of the open events finds each one's parent.
  std::map<std::uint64_t, std::vector<const TracedEvent*>> by_thread;
  for (const auto& e : events) {
    if (!e.device) by_thread[e.thread].push_back(&e);
  }
  std::map<std::string, OperatorTotals> cpu, kernels;
  for (auto& [thread, list] : by_thread) {
    std::sort(list.begin(), list.end(), [](const TracedEvent* a, const TracedEvent* b) {
      return a->start_ns != b->start_ns ? a->start_ns < b->start_ns : a->end_ns > b->end_ns;
    });
    std::vector<std::pair<const TracedEvent*, double>> open;  // event, time of its children (us)
    auto close = [&](const TracedEvent* e, double children_us) {
      if (e->name.rfind("bellows::", 0) == 0) return;
      OperatorTotals& t = cpu[e->name];
      const double us = (e->end_ns - e->start_ns) / 1e3;
      ++t.calls;
      t.total_us += us;
      t.self_us += std::max(0.0, us - children_us);
    };
    for (const TracedEvent* e : list) {
      while (!open.empty() && open.back().first->end_ns <= e->start_ns) {
        close(open.back().first, open.back().second);
        open.pop_back();
      }
      if (!open.empty()) open.back().second += (e->end_ns - e->start_ns) / 1e3;
      open.emplace_back(e, 0.0);
    }
    while (!open.empty()) {
      close(open.back().first, open.back().second);
      open.pop_back();
    }
  }
  for (const auto& e : events) {
    if (!e.device) continue;
    OperatorTotals& t = kernels[e.name];
    ++t.calls;
    t.total_us += (e.end_ns - e.start_ns) / 1e3;
    t.self_us = t.total_us;
  }
  std::string out = operator_rows(cpu, top, "top operators of the traced steps by self time (CPU):", false);
  if (!kernels.empty()) out += operator_rows(kernels, top, "top device kernels of the traced steps by time:", true);
  return out;
}

}  // namespace bellows::obs
