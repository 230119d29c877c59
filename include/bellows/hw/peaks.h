// Measured ceilings that MFU and bandwidth figures divide by: matrix-multiply throughput per precision
// and memory bandwidth, on the CPU and on each usable GPU, with the method recorded beside each number.
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
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

// The measured peaks of this machine, cached so that a run does not measure again: a JSON file in the user
// cache (util/cache.h), one per machine and setting: CPU model, usable CPUs, intra-op threads, LibTorch version
// and GPU names. The runs' MFU divides by one measurement only, the standard one (default MeasureOptions), however it
// was taken: by the first run that needed it, or by `bellows hw --measure` (store_peaks) with no --seconds or
// --matmul-size. The file records the options; a cache of other options (an older bellows, a quick measurement) is
// not used. Measured with other options, `bellows hw --measure` reports its figures and caches nothing.
bool is_standard(const MeasureOptions& options);
struct CachedPeaks {
  std::vector<PeakMeasurement> peaks;  // empty: none cached and not measured
  std::filesystem::path file;          // the cache file
  bool measured_now = false;           // measured by this call (none was cached)
  double seconds = 0;                  // the measurement's time, when measured now
};
// Reads the cache; with none and `measure_if_missing`, measures (time-bounded: about 2 s on a CPU) and writes it.
// A cache file that cannot be read or parsed counts as none; one that cannot be written is only not written.
CachedPeaks cached_peaks(const HardwareInfo& info, bool measure_if_missing);
// Caches `peaks` measured with `options`; false (nothing written) when they are not the standard ones or the cache
// cannot be written.
bool store_peaks(const HardwareInfo& info, const std::vector<PeakMeasurement>& peaks, const MeasureOptions& options = {});

// The measured matmul peak (FLOP/s) named `name` (a precision policy's PrecisionEntry::matmul_peak: matmul_fp32,
// matmul_fp32_tf32, matmul_bf16, matmul_fp16) on `device` ("cpu", "cuda:0"), with its name. std::nullopt when it
// was not measured or the hardware has no support for it.
struct MatmulPeak {
  double flops_per_s = 0;
  std::string name;
};
std::optional<MatmulPeak> matmul_peak(const std::vector<PeakMeasurement>& peaks, const std::string& name,
                                      const std::string& device);

}  // namespace bellows::hw
