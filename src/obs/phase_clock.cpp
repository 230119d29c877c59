// Phase times of training steps; see phase_clock.h.
#include "bellows/obs/phase_clock.h"

#include <c10/core/Event.h>
#include <c10/core/impl/VirtualGuardImpl.h>

#include <algorithm>
#include <vector>

#include "bellows/obs/memory.h"

namespace bellows::obs {

const char* phase_name(Phase phase) {
  switch (phase) {
    case Phase::kData: return "data";
    case Phase::kCopy: return "copy";
    case Phase::kForward: return "forward";
    case Phase::kBackward: return "backward";
    case Phase::kOptimizer: return "optimizer";
    case Phase::kOther: return "other";
  }
  return "?";
}

// Device-generic c10::Event (timing enabled): no CUDA headers here, the same build serves CPU-only LibTorch.
struct PhaseClock::DeviceEvents {
  c10::impl::VirtualGuardImpl impl;
  c10::Device device;
  std::vector<c10::Event> events;  // events[0] is the window's first mark
  std::vector<int> phases;         // phases[i]: what lies between events[i] and events[i + 1] (-1: not counted)
  explicit DeviceEvents(c10::Device d) : impl(d.type()), device(d) {}
  void record() {
    events.emplace_back(device.type(), c10::EventFlag::BACKEND_DEFAULT);
    events.back().record(impl.getStream(device));
  }
};

PhaseClock::PhaseClock(c10::Device device) : device_(device), last_(Clock::now()) {
  if (device.is_cuda()) events_ = std::make_unique<DeviceEvents>(device);
  peak_bytes_.fill(-1);
  reset_peak(device_);  // the first lap's peak is its own
}

void PhaseClock::sample_memory(Phase phase) {
  // Host-side counters only (an atomic on the CPU, the caching allocator's statistics on CUDA): no device sync.
  const MemoryStats stats = memory_stats(device_);
  if (!stats.tracked) return;
  std::int64_t& peak = peak_bytes_[static_cast<std::size_t>(phase)];
  peak = std::max(peak, stats.peak_bytes);
  reset_peak(device_);
}

std::array<std::int64_t, kPhases> PhaseClock::take_memory() {
  std::array<std::int64_t, kPhases> peaks = peak_bytes_;
  peak_bytes_.fill(-1);
  return peaks;
}

PhaseClock::~PhaseClock() = default;

void PhaseClock::mark() {
  last_ = Clock::now();
  if (events_) {
    if (!events_->events.empty()) events_->phases.push_back(-1);  // the time since the last event is not counted
    events_->record();
  }
}

void PhaseClock::lap(Phase phase) {
  const Clock::time_point now = Clock::now();
  sample_memory(phase);
  if (!events_ || phase == Phase::kData) {
    host_ms_[static_cast<std::size_t>(phase)] += std::chrono::duration<double, std::milli>(now - last_).count();
  }
  last_ = now;
  last_phase_ = phase;
  if (events_) {
    if (events_->events.empty()) events_->record();
    events_->record();
    events_->phases.push_back(static_cast<int>(phase));
  }
}

std::array<double, kPhases> PhaseClock::take() {
  std::array<double, kPhases> ms = host_ms_;
  host_ms_ = {};
  if (events_ && !events_->phases.empty()) {
    events_->events.back().synchronize();
    for (std::size_t i = 0; i < events_->phases.size(); ++i) {
      const int phase = events_->phases[i];
      if (phase < 0 || phase == static_cast<int>(Phase::kData)) continue;  // not counted, or host time (above)
      ms[static_cast<std::size_t>(phase)] += events_->events[i].elapsedTime(events_->events[i + 1]);
    }
    // The last event starts the next window.
    c10::Event last = std::move(events_->events.back());
    events_->events.clear();
    events_->phases.clear();
    events_->events.push_back(std::move(last));
  }
  return ms;
}

}  // namespace bellows::obs
