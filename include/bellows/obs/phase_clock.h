// Where a training step's time goes, measured in every run without extra synchronisation: the step is cut into
// phases (waiting for data, the host-to-device copy, forward, backward, optimizer, and the rest: logging,
// evaluation, checkpoints), and each lap adds the time since the previous mark to one phase. On the CPU the
// laps read the wall clock (the ops ran when the call returned). On CUDA the device phases (copy, forward,
// backward, optimizer, other) are CUDA events recorded on the current stream and read when the window is taken,
// after the trainer's one synchronisation per logging window; waiting for data is host time on every device.
// Each lap also takes the peak of tensor memory since the previous lap as that phase's (seed 004's memory
// tracker, per phase): the device's counted peak (obs/memory.h; on CUDA the caching allocator's, which moves
// when the host launches the work), reset at every lap, so the peaks of a window's phases are its peak by phase.
#pragma once

#include <c10/core/Device.h>

#include <array>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

namespace bellows::obs {

enum class Phase : std::size_t { kData, kCopy, kForward, kBackward, kOptimizer, kOther };
inline constexpr std::size_t kPhases = 6;
// "data", "copy", "forward", "backward", "optimizer", "other".
const char* phase_name(Phase phase);

class PhaseClock {
 public:
  explicit PhaseClock(c10::Device device);
  ~PhaseClock();
  PhaseClock(const PhaseClock&) = delete;
  PhaseClock& operator=(const PhaseClock&) = delete;

  void mark();            // the start of what the next lap measures
  void lap(Phase phase);  // the time since the last mark (or lap) goes to `phase`
  // The phase of the last lap (kOther before any): where a step that failed got to (out-of-memory reports).
  Phase last() const { return last_phase_; }
  // The milliseconds per phase since the last take() (or construction); on CUDA, waits for the window's events.
  std::array<double, kPhases> take();
  // The peak tensor bytes of each phase since the last take_memory() (or construction); -1 where nothing was
  // measured: the device's memory is not counted, or the phase did not run.
  std::array<std::int64_t, kPhases> take_memory();
  // The same without clearing them.
  const std::array<std::int64_t, kPhases>& memory_so_far() const { return peak_bytes_; }

 private:
  void sample_memory(Phase phase);
  struct DeviceEvents;  // CUDA: the window's events, read in take()
  using Clock = std::chrono::steady_clock;
  c10::Device device_;
  Clock::time_point last_;
  Phase last_phase_ = Phase::kOther;
  std::array<double, kPhases> host_ms_{};
  std::unique_ptr<DeviceEvents> events_;
  std::array<std::int64_t, kPhases> peak_bytes_;
};

}  // namespace bellows::obs
