// Measured ceilings that MFU and bandwidth figures divide by: matrix-multiply throughput per precision
// and memory bandwidth, on the CPU and on each usable GPU, with the method recorded beside each number.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace bellows::hw {

struct HardwareInfo;

struct PeakMeasurement {
  std::string name;       // "matmul_fp32", "matmul_bf16", "memory_copy"
  std::string device;     // "cpu", "cuda:0", ...
  double value = 0;       // 0 when not supported
  std::string unit;       // "GFLOP/s" or "GB/s"
  std::string method;     // how it was measured, for the report; or why it was not
  bool supported = true;  // false: the device has no hardware for it (bf16 on a CPU without AVX512_BF16/AMX),
                          // so its software path is not timed: it is no ceiling, and it took minutes
};

// Every figure is bounded by time, not by work: a matrix product that would not fit its time budget is timed
// on smaller matrices (halving n from matmul_size, down to 128), and the size used is in `method`.
struct MeasureOptions {
  std::int64_t matmul_size = 2048;            // largest square n x n x n product; 2 n^3 FLOPs each
  std::int64_t copy_bytes = 256LL << 20;      // bytes per copy; counted once read, once written
  double min_seconds = 0.4;                   // timed work per figure (after a warm-up run)
  int trials = 3;                             // best of this many timed windows
};

std::vector<PeakMeasurement> measure_peaks(const HardwareInfo& info, const MeasureOptions& options = {});

}  // namespace bellows::hw
