// A profiler trace of chosen training steps (seed 000's "profiler trace"): LibTorch's Kineto profiler records
// the operators (and CUDA kernels on a GPU) of `steps` optimizer steps from `start_step`, and writes a Chrome
// trace (chrome://tracing, Perfetto, TensorBoard's profiler plugin) when they end. The trainer marks its
// phases in the trace as user scopes: bellows::data, bellows::forward, bellows::backward, bellows::optimizer.
// The trace file is written durably and atomically (util/atomic_file.h), so it is never seen half-written.
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>

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
  bool active() const { return active_; }
  bool written() const { return written_; }

 private:
  void stop_and_write();
  ProfileOptions options_;
  bool active_ = false;
  bool written_ = false;
};

}  // namespace bellows::obs
