// The GPU-absent path: on a machine without a usable GPU (CI, this project's build machines) the probe says
// why in one line and bellows recommends the CPU. With a GPU, `bellows selftest --device cuda` covers it.
#include <gtest/gtest.h>

#include "bellows/hw/hardware_info.h"

namespace bellows::hw {
namespace {

TEST(GpuProbe, CpuTwinSaysCudaNotCompiled) {
  const CudaInfo info = make_no_gpu_probe()->probe({"8.0"});
  EXPECT_FALSE(info.compiled);
  EXPECT_FALSE(info.usable);
  EXPECT_TRUE(info.gpus.empty());
  EXPECT_NE(info.reason.find("CUDA not compiled"), std::string::npos);
  EXPECT_NE(info.reason.find("runs on the CPU"), std::string::npos);
}

TEST(GpuProbe, AbsentGpuGivesOneLineReasonAndCpuPlan) {
  const CudaInfo info = make_gpu_probe()->probe({"8.0"});
  if (info.usable) GTEST_SKIP() << "a usable GPU is present; this test covers the GPU-absent path";
  EXPECT_TRUE(info.gpus.empty());
  EXPECT_FALSE(info.reason.empty());
  EXPECT_EQ(info.reason.find('\n'), std::string::npos) << "the reason is one line";
  EXPECT_NE(info.reason.find("runs on the CPU"), std::string::npos);
#ifdef BELLOWS_TEST_HAVE_CUDA
  EXPECT_TRUE(info.compiled);
  EXPECT_FALSE(info.runtime_version.empty()) << "the CUDA runtime version is known without a driver";
#endif
}

TEST(GpuProbe, HardwareInfoWithCpuTwinRecommendsCpu) {
  const HardwareInfo info = HardwareInfo::probe(*make_no_gpu_probe());
  ASSERT_FALSE(info.recommendations.empty());
  EXPECT_EQ(info.recommendations.front().key, "device");
  EXPECT_EQ(info.recommendations.front().value, "cpu");
  EXPECT_EQ(info.recommendations.front().reason, info.cuda.reason);
}

}  // namespace
}  // namespace bellows::hw
