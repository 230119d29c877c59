// Recommendations from made-up machines: the decision table of issue 2 (precision by CPU ISA and GPU
// compute capability, device fallback, threads, workers, memory) with its reasons.
#include <gtest/gtest.h>

#include "bellows/hw/hardware_info.h"

namespace bellows::hw {
namespace {

const Recommendation& find(const std::vector<Recommendation>& recs, const std::string& key) {
  for (const auto& r : recs) {
    if (r.key == key) return r;
  }
  static const Recommendation none{"<missing>", "<missing>", ""};
  return none;
}

HardwareInfo cpu_machine(bool avx512_bf16, bool amx_bf16) {
  HardwareInfo info;
  info.cpu.physical_cores = 8;
  info.cpu.logical_cores = 16;
  info.cpu.usable_cpus = 16;
  info.cpu.numa_nodes = 1;
  info.cpu.isa.avx512f = true;
  info.cpu.isa.avx512_bf16 = avx512_bf16;
  info.cpu.isa.amx_bf16 = amx_bf16;
  info.memory.total_bytes = 64LL << 30;
  info.memory.available_bytes = 50LL << 30;
  info.cuda.reason = "no NVIDIA driver: libcuda.so.1 cannot be loaded; bellows runs on the CPU";
  info.torch.cuda_arch_list = {"7.5", "8.0", "8.6", "9.0"};
  return info;
}

HardwareInfo gpu_machine(int major, int minor) {
  HardwareInfo info = cpu_machine(false, false);
  info.cuda.compiled = info.cuda.usable = true;
  info.cuda.reason.clear();
  GpuInfo gpu;
  gpu.name = "Test GPU";
  gpu.cc_major = major;
  gpu.cc_minor = minor;
  gpu.total_memory_bytes = 40LL << 30;
  gpu.free_memory_bytes = 39LL << 30;
  gpu.free_memory_known = true;
  derive_gpu_features(gpu, info.torch.cuda_arch_list);
  info.cuda.gpus.push_back(gpu);
  return info;
}

TEST(Recommend, CpuWithAvx512Bf16PicksBf16Mixed) {
  const auto recs = recommend(cpu_machine(true, false));
  EXPECT_EQ(find(recs, "device").value, "cpu");
  EXPECT_NE(find(recs, "device").reason.find("libcuda.so.1"), std::string::npos);
  EXPECT_EQ(find(recs, "precision").value, "bf16-mixed");
  EXPECT_NE(find(recs, "precision").reason.find("AVX512_BF16"), std::string::npos);
}

TEST(Recommend, CpuWithAmxNamesAmx) {
  const auto recs = recommend(cpu_machine(true, true));
  EXPECT_EQ(find(recs, "precision").value, "bf16-mixed");
  EXPECT_NE(find(recs, "precision").reason.find("AMX-BF16"), std::string::npos);
}

TEST(Recommend, CpuWithoutBf16PicksFp32) {
  const auto recs = recommend(cpu_machine(false, false));
  EXPECT_EQ(find(recs, "precision").value, "fp32");
  EXPECT_EQ(find(recs, "data.pin_memory").value, "false");
}

TEST(Recommend, ThreadsFollowUsablePhysicalCores) {
  HardwareInfo info = cpu_machine(false, false);
  EXPECT_EQ(find(recommend(info), "threads.intra_op").value, "8");
  EXPECT_EQ(find(recommend(info), "data.workers").value, "2");
  info.cpu.usable_cpus = 8;  // affinity: half the logical CPUs
  EXPECT_EQ(find(recommend(info), "threads.intra_op").value, "4");
  info.cpu.cgroup_cpu_limit = 2.5;  // quota rounds up
  EXPECT_EQ(find(recommend(info), "threads.intra_op").value, "3");
  EXPECT_EQ(find(recommend(info), "data.workers").value, "1");
}

TEST(Recommend, AmpereGpuPicksBf16AndTf32) {
  const auto recs = recommend(gpu_machine(8, 0));
  EXPECT_EQ(find(recs, "device").value, "cuda");
  EXPECT_EQ(find(recs, "precision").value, "bf16-mixed");
  EXPECT_EQ(find(recs, "tf32").value, "true");
  EXPECT_EQ(find(recs, "data.pin_memory").value, "true");
  EXPECT_EQ(find(recs, "memory.gpu_budget_gib").value, "35.1");
}

TEST(Recommend, TuringGpuPicksFp16WithLossScaling) {
  const auto recs = recommend(gpu_machine(7, 5));
  EXPECT_EQ(find(recs, "precision").value, "fp16-mixed");
  EXPECT_NE(find(recs, "precision").reason.find("loss scaling"), std::string::npos);
  EXPECT_EQ(find(recs, "tf32").value, "false");
}

TEST(Recommend, GpuOutsideLibTorchArchListFallsBackToCpu) {
  const auto recs = recommend(gpu_machine(7, 0));  // V100: sm_70 is not in the list
  EXPECT_EQ(find(recs, "device").value, "cpu");
  EXPECT_NE(find(recs, "device").reason.find("not among LibTorch's compiled architectures"), std::string::npos);
}

TEST(Recommend, MemoryBudgetRespectsCgroupLimit) {
  HardwareInfo info = cpu_machine(false, false);
  EXPECT_EQ(find(recommend(info), "memory.host_budget_gib").value, "40.0");
  info.memory.cgroup_limit_bytes = 10LL << 30;
  EXPECT_EQ(find(recommend(info), "memory.host_budget_gib").value, "8.0");
}

TEST(Recommend, NumaBindingOnlyWithSeveralNodes) {
  HardwareInfo info = cpu_machine(false, false);
  EXPECT_EQ(find(recommend(info), "numa").key, "<missing>");
  info.cpu.numa_nodes = 2;
  EXPECT_EQ(find(recommend(info), "numa").value, "bind");
}

TEST(GpuFeatures, FromComputeCapability) {
  const std::vector<std::string> archs = {"7.5", "8.0", "8.6", "9.0"};
  GpuInfo g;
  g.cc_major = 8;
  g.cc_minor = 9;  // Ada runs sm_86 cubins
  derive_gpu_features(g, archs);
  EXPECT_TRUE(g.bf16 && g.tf32 && g.fp16_tensor_cores && g.arch_supported);
  g.cc_major = 7;
  g.cc_minor = 0;
  derive_gpu_features(g, archs);
  EXPECT_FALSE(g.bf16 || g.tf32 || g.arch_supported);
  EXPECT_TRUE(g.fp16_tensor_cores);
  g.cc_major = 6;
  g.cc_minor = 1;
  derive_gpu_features(g, archs);
  EXPECT_FALSE(g.fp16_tensor_cores);
}

TEST(GpuFeatures, AnUnlistedArchitectureListCountsAsSupported) {
  // torch 2.11's build configuration has no CUDA_FLAGS, so the list is empty: an H100 ran there (docs/gpu.md).
  GpuInfo g;
  g.cc_major = 9;
  g.cc_minor = 0;
  derive_gpu_features(g, {});
  EXPECT_TRUE(g.arch_supported);
  EXPECT_FALSE(g.arch_listed);
  derive_gpu_features(g, {"8.0", "8.6"});
  EXPECT_FALSE(g.arch_supported);
  EXPECT_TRUE(g.arch_listed);
}

}  // namespace
}  // namespace bellows::hw
