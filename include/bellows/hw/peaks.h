// Measured ceilings that MFU and bandwidth figures divide by: matrix-multiply throughput per precision
// and memory bandwidth, on the CPU and on each usable GPU, with the method recorded beside each number.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace bellows::hw {

struct HardwareInfo;

struct PeakMeasurement {
  std::string name;    // "matmul_fp32", "matmul_bf16", "memory_copy"
  std::string device;  // "cpu", "cuda:0", ...
  double value = 0;
  std::string unit;    // "GFLOP/s" or "GB/s"
  std::string method;  // how it was measured, for the report
};

struct MeasureOptions {
  std::int64_t matmul_size = 2048;            // square n x n x n products; 2 n^3 FLOPs each
  std::int64_t copy_bytes = 256LL << 20;      // bytes per copy; counted once read, once written
  double min_seconds = 0.4;                   // timed work per figure (after a warm-up run)
  int trials = 3;                             // best of this many timed windows
};

std::vector<PeakMeasurement> measure_peaks(const HardwareInfo& info, const MeasureOptions& options = {});

}  // namespace bellows::hw
