// Peak measurement runs through LibTorch and reports what it measured and how. No timing is asserted:
// only that each figure exists, is finite and positive, and names its method.
#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>

#include "bellows/hw/hardware_info.h"
#include "bellows/hw/peaks.h"
#include "bellows/util/error.h"
#include "test_util.h"

#include <cstdlib>
#include <fstream>
#include <optional>

namespace bellows::hw {
namespace {

// A measurement of 1 MiB copies and products of at most `matmul_size`, within `min_seconds` a figure.
MeasureOptions small_measurement(std::int64_t matmul_size, double min_seconds, int trials) {
  MeasureOptions opt;
  opt.matmul_size = matmul_size;
  opt.copy_bytes = 1 << 20;
  opt.min_seconds = min_seconds;
  opt.trials = trials;
  return opt;
}

TEST(Peaks, CpuFiguresWithMethods) {
  const MeasureOptions opt = small_measurement(64, 0.03, 2);
  HardwareInfo info = HardwareInfo::probe(*make_no_gpu_probe());
  info.cpu.isa.avx512_bf16 = true;  // timed whatever this CPU has: 64x64 products take microseconds anyway
  info.cpu.onednn_cap.reset();       // and whatever ONEDNN_MAX_CPU_ISA the tests run under
  const auto peaks = measure_peaks(info, opt);
  ASSERT_EQ(peaks.size(), 3u);
  EXPECT_EQ(peaks[0].name, "matmul_fp32");
  EXPECT_EQ(peaks[1].name, "matmul_bf16");
  EXPECT_EQ(peaks[2].name, "memory_copy");
  for (const auto& p : peaks) {
    EXPECT_TRUE(p.supported) << p.name;
    EXPECT_EQ(p.device, "cpu");
    EXPECT_TRUE(std::isfinite(p.value) && p.value > 0) << p.name;
    EXPECT_NE(p.method.find("best of 2"), std::string::npos) << p.method;
  }
  EXPECT_EQ(peaks[0].unit, "GFLOP/s");
  EXPECT_NE(peaks[0].method.find("64x64"), std::string::npos);
  EXPECT_EQ(peaks[2].unit, "GB/s");
  EXPECT_NE(peaks[2].method.find("read + written"), std::string::npos);
}

// bf16 on a CPU without AVX512_BF16/AMX is not timed: no figure, the reason instead. And a product too big for
// the time budget is timed on smaller matrices (halved from matmul_size), which the method says.
TEST(Peaks, NoHardwareSupportAndTheTimeBudget) {
  HardwareInfo info = HardwareInfo::probe(*make_no_gpu_probe());
  info.cpu.isa.avx512_bf16 = info.cpu.isa.amx_bf16 = false;
  const MeasureOptions opt = small_measurement(8192, 0.05, 2);  // 8192: 1.1 TFLOP a product, minutes on 2 cores
  const auto start = std::chrono::steady_clock::now();
  const auto peaks = measure_peaks(info, opt);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  ASSERT_EQ(peaks.size(), 3u);
  EXPECT_EQ(peaks[1].name, "matmul_bf16");
  EXPECT_FALSE(peaks[1].supported);
  EXPECT_EQ(peaks[1].value, 0.0);
  EXPECT_NE(peaks[1].method.find("no hardware support"), std::string::npos) << peaks[1].method;
  EXPECT_TRUE(peaks[0].supported);
  EXPECT_GT(peaks[0].value, 0.0);
  EXPECT_EQ(peaks[0].method.find("8192x8192"), std::string::npos) << peaks[0].method;
  EXPECT_NE(peaks[0].method.find("not 8192: it would not fit the time budget"), std::string::npos) << peaks[0].method;
  EXPECT_LT(seconds, 60.0) << "an 8192^3 fp32 product alone takes longer than this on the machines we know";
}

// Under a oneDNN cap below AVX512_CORE_BF16 the CPU's bf16 units are idle: bf16 is not timed, and the cap is named.
TEST(Peaks, TheBf16PeakIsNotTimedUnderAOnednnCapAndSaysWhy) {
  HardwareInfo info = HardwareInfo::probe(*make_no_gpu_probe());
  info.cpu.isa.avx512_bf16 = true;
  info.cpu.onednn_cap = onednn_isa_cap("AVX2", nullptr);
  const auto peaks = measure_peaks(info, small_measurement(64, 0.02, 1));
  ASSERT_EQ(peaks.size(), 3u);
  EXPECT_EQ(peaks[1].name, "matmul_bf16");
  EXPECT_FALSE(peaks[1].supported);
  EXPECT_NE(peaks[1].method.find("no hardware support"), std::string::npos) << peaks[1].method;
  EXPECT_NE(peaks[1].method.find("ONEDNN_MAX_CPU_ISA=AVX2"), std::string::npos) << peaks[1].method;
}

// A run that measures its machine's peaks (the first on a machine) must draw the same random numbers afterwards as
// one that reads them from the cache: the measurement leaves the global generator alone.
TEST(Peaks, MeasuringLeavesTheGlobalGeneratorAlone) {
  const MeasureOptions opt = small_measurement(64, 0.02, 1);
  at::manual_seed(7);
  const at::Tensor expected = at::rand({8});
  at::manual_seed(7);
  measure_peaks(HardwareInfo::probe(*make_no_gpu_probe()), opt);
  EXPECT_TRUE(at::rand({8}).equal(expected));
}

TEST(Peaks, InvalidOptionsAreUsageErrors) {
  MeasureOptions opt;
  opt.trials = 0;
  try {
    measure_peaks(HardwareInfo::probe(*make_no_gpu_probe()), opt);
    FAIL() << "no exception";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kUsage);
    EXPECT_NE(e.message().find("trials=0"), std::string::npos);
  }
}

// The runs' MFU divides by one measurement, the standard one: a measurement with other options is not cached, and a
// cache file without the standard options (an older format, another protocol) is not used.
TEST(Peaks, TheCacheHoldsTheStandardMeasurementOnly) {
  const test_support::TempDir dir("peaks_cache");
  std::optional<std::string> old;
  if (const char* o = std::getenv("BELLOWS_CACHE")) old = o;
  ::setenv("BELLOWS_CACHE", dir.path().c_str(), 1);
  const HardwareInfo info = HardwareInfo::probe(*make_no_gpu_probe());
  const std::vector<PeakMeasurement> peaks = {{"matmul_fp32", "cpu", 123.0, "GFLOP/s", "test", true}};
  MeasureOptions longer;
  longer.min_seconds = 2;
  EXPECT_FALSE(is_standard(longer));
  EXPECT_FALSE(store_peaks(info, peaks, longer));
  const CachedPeaks none = cached_peaks(info, /*measure_if_missing=*/false);
  EXPECT_TRUE(none.peaks.empty());
  EXPECT_FALSE(std::filesystem::exists(none.file));
  ASSERT_TRUE(store_peaks(info, peaks));
  const CachedPeaks cached = cached_peaks(info, false);
  ASSERT_EQ(cached.peaks.size(), 1u);
  EXPECT_EQ(cached.peaks[0].value, 123.0);
  EXPECT_EQ(matmul_peak(cached.peaks, "matmul_fp32", "cpu")->flops_per_s, 123e9);
  std::ofstream(cached.file) << R"([{"name": "matmul_fp32", "device": "cpu", "value": 999.0, "unit": "GFLOP/s", "method": "old", "supported": true}])";
  EXPECT_TRUE(cached_peaks(info, false).peaks.empty()) << "an older cache without its options";
  std::ofstream(cached.file) << R"({"protocol": {"matmul_size": 64, "copy_bytes": 1, "min_seconds": 0.01, "trials": 1}, "peaks": []})";
  EXPECT_TRUE(cached_peaks(info, false).peaks.empty()) << "another protocol";
  if (old) ::setenv("BELLOWS_CACHE", old->c_str(), 1);
  else ::unsetenv("BELLOWS_CACHE");
}

}  // namespace
}  // namespace bellows::hw
