// Peak measurement runs through LibTorch and reports what it measured and how. No timing is asserted:
// only that each figure exists, is finite and positive, and names its method.
#include <gtest/gtest.h>

#include <cmath>

#include "bellows/hw/hardware_info.h"
#include "bellows/hw/peaks.h"
#include "bellows/util/error.h"

namespace bellows::hw {
namespace {

TEST(Peaks, CpuFiguresWithMethods) {
  MeasureOptions opt;
  opt.matmul_size = 64;
  opt.copy_bytes = 1 << 20;
  opt.min_seconds = 0.03;
  opt.trials = 2;
  const auto peaks = measure_peaks(HardwareInfo::probe(*make_no_gpu_probe()), opt);
  ASSERT_EQ(peaks.size(), 3u);
  EXPECT_EQ(peaks[0].name, "matmul_fp32");
  EXPECT_EQ(peaks[1].name, "matmul_bf16");
  EXPECT_EQ(peaks[2].name, "memory_copy");
  for (const auto& p : peaks) {
    EXPECT_EQ(p.device, "cpu");
    EXPECT_TRUE(std::isfinite(p.value) && p.value > 0) << p.name;
    EXPECT_NE(p.method.find("best of 2"), std::string::npos) << p.method;
  }
  EXPECT_EQ(peaks[0].unit, "GFLOP/s");
  EXPECT_NE(peaks[0].method.find("64x64"), std::string::npos);
  EXPECT_EQ(peaks[2].unit, "GB/s");
  EXPECT_NE(peaks[2].method.find("read + written"), std::string::npos);
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

}  // namespace
}  // namespace bellows::hw
