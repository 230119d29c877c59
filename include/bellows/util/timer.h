// Wall-clock intervals on the monotonic clock, for the timings that loaders and datasets report.
//   const auto start = std::chrono::steady_clock::now();  ...;  context.times.read += seconds_since(start);
#pragma once

#include <chrono>

namespace bellows {

// Seconds of std::chrono::steady_clock time since `start`.
inline double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

// Seconds on std::chrono::steady_clock since its epoch: differences between two readings are intervals.
inline double now_s() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }

}  // namespace bellows
