// A profiler trace of chosen training steps (seed 000's "profiler trace"): LibTorch's Kineto profiler records
// the operators (and CUDA kernels on a GPU) of `steps` optimizer steps from `start_step`, and writes a Chrome
// trace (chrome://tracing, Perfetto, TensorBoard's profiler plugin) when they end. The trainer marks its
// phases in the trace as user scopes: bellows::data, bellows::forward, bellows::backward, bellows::optimizer.
// The trace file is written durably and atomically (util/atomic_file.h), so it is never seen half-written.
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

namespace bellows::obs {

struct ProfileOptions {
  bool enabled = false;
  std::int64_t start_step = 5;  // optimizer steps taken before the trace starts (skips warm-up)
  std::int64_t steps = 3;       // optimizer steps traced
  bool record_shapes = true;    // operator input shapes in the trace
  bool profile_memory = false;  // tensor allocations and frees in the trace
  std::filesystem::path path;   // the trace file (Chrome trace JSON)
};

class StepProfiler {
 public:
  explicit StepProfiler(ProfileOptions options);
  ~StepProfiler();  // stops a trace still running (without writing it)
  StepProfiler(const StepProfiler&) = delete;
  StepProfiler& operator=(const StepProfiler&) = delete;

  // Called with the optimizer steps taken so far, before a step begins and after it ends. Returns true when
  // after_step wrote the trace.
  void before_step(std::int64_t steps_taken);
  bool after_step(std::int64_t steps_taken);
  // Writes the trace when the run ends while it is still recording (a run shorter than the window).
  bool finish();
  // After the trace is written: the top operators of the traced window by self time (CPU operators; on CUDA
  // also the kernels by device time), as a table, "" before.
  const std::string& top_operators() const { return top_operators_; }
  bool active() const { return active_; }
  bool written() const { return written_; }

 private:
  void stop_and_write();
  ProfileOptions options_;
  bool active_ = false;
  bool written_ = false;
  std::string top_operators_;
};

// Counts the floating-point operations of what runs between start() and stop(), from the ops' shapes: LibTorch's
// profiler with with_flops (Kineto, CPU activity), which counts matrix products (mm, addmm, bmm, baddbmm), 2-D
// convolutions and elementwise mul/add, and bellows' formulas for what it leaves at 0 (src/obs/op_flops.cpp: 1-D,
// 3-D and transposed convolutions, every convolution's backward, mv/dot/addbmm and the in-place products, the fused
// attention kernels), in the forward and in autograd's backward alike. Other ops (activations, norms, reductions,
// the fused optimizer) count 0. Only one profiler runs at a time: start() returns false while another (a
// StepProfiler trace) is on.
class FlopCounter {
 public:
  ~FlopCounter();  // stops a count still running
  bool start();
  double stop();  // the FLOPs counted since start()
  // Initialises LibTorch's profiler (Kineto) on the calling thread, once per process, by an empty count. Kineto's
  // first use must run on the thread that loaded LibTorch (the program's main thread), else it prints "ERROR:
  // External init callback must run in same thread as registerClient" (harmless, and not a log line its level
  // silences): a program whose training runs on another thread (app/online.h) calls this on its own thread first.
  static void initialise_on_this_thread();
 private:
  bool active_ = false;
};

// One traced event: name, thread, start and end (ns), on the CPU or a device.
struct TracedEvent {
  std::string name;
  std::uint64_t thread = 0;
  std::uint64_t start_ns = 0, end_ns = 0;
  bool device = false;  // a device kernel (its time is device time)
};

// The table of the `top` names by self time (an event's time less that of the events nested in it on its
// thread), with calls, total and self time, and each name's share of all self time; device kernels in a second
// table by time. Events named bellows::* (the trainer's phase scopes) are containers, not operators: they are
// left out of the table but still subtract from their parents' self time.
std::string top_operators_table(const std::vector<TracedEvent>& events, std::size_t top = 15);

}  // namespace bellows::obs
