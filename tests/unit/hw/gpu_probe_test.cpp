// The GPU-absent path: on a machine without a usable GPU (CI, this project's build machines) the probe says
// why in one line and bellows recommends the CPU. With a GPU, `bellows selftest --device cuda` covers it.
#include <gtest/gtest.h>

#include <cstdlib>
#include <string>
#include <vector>

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

// The CUDA runtime as the probe sees it, recording each call: which devices the probe touches, in which order.
struct RecordingCalls final : CudaDeviceCalls {
  mutable std::vector<std::string> log;
  bool properties(int index, GpuInfo& gpu) const override {
    log.push_back("properties " + std::to_string(index));
    gpu.name = "GPU " + std::to_string(index);
    gpu.total_memory_bytes = 80LL << 30;
    gpu.cc_major = 9;
    return true;
  }
  bool select(int index) const override {
    log.push_back("select " + std::to_string(index));
    return true;
  }
  bool free_memory(std::int64_t& free_bytes) const override {
    log.push_back("free memory");
    free_bytes = 70LL << 30;
    return true;
  }
};

// A rank of a multi-GPU node makes its own GPU current before anything else, asks free memory there only and reads
// the others' properties, which needs no context: one context per process, on its own GPU.
TEST(GpuProbe, TouchesOnlyTheLocalDevice) {
  RecordingCalls calls;
  CudaInfo info;
  probe_devices(calls, 4, 2, {}, info);
  EXPECT_EQ(calls.log, (std::vector<std::string>{"select 2", "free memory", "properties 0", "properties 1", "properties 2", "properties 3"}));
  ASSERT_EQ(info.gpus.size(), 4u);
  for (const GpuInfo& g : info.gpus) {
    EXPECT_EQ(g.free_memory_known, g.index == 2) << g.index;
    EXPECT_EQ(g.free_memory_bytes, g.index == 2 ? 70LL << 30 : 80LL << 30) << "the total where free memory is not known";
    EXPECT_TRUE(g.arch_supported);
  }
}

// Which GPU is this process's before the plan chooses: the launcher's local rank, the only GPU it sees, or 0.
TEST(GpuProbe, LocalGpuIndexFollowsTheLauncher) {
  for (const char* name : {"LOCAL_RANK", "SLURM_LOCALID", "OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID"}) unsetenv(name);
  EXPECT_EQ(local_gpu_index(4), 0);
  setenv("SLURM_LOCALID", "3", 1);
  EXPECT_EQ(local_gpu_index(4), 3);
  setenv("LOCAL_RANK", "1", 1);
  EXPECT_EQ(local_gpu_index(4), 1) << "LOCAL_RANK first";
  EXPECT_EQ(local_gpu_index(1), 0) << "one visible GPU per rank";
  setenv("LOCAL_RANK", "5", 1);
  EXPECT_EQ(local_gpu_index(4), 0) << "beyond the GPUs: the plan refuses it";
  setenv("LOCAL_RANK", "x", 1);
  EXPECT_EQ(local_gpu_index(4), 0);
  unsetenv("LOCAL_RANK");
  unsetenv("SLURM_LOCALID");
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
