// The GPU probe's CPU twin and the factory that picks the CUDA probe when bellows was built with CUDA.
#include "bellows/hw/gpu_probe.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <string>

namespace bellows::hw {

void derive_gpu_features(GpuInfo& gpu, const std::vector<std::string>& arch_list) {
  const int cc = gpu.cc_major * 10 + gpu.cc_minor;
  gpu.fp16_tensor_cores = cc >= 70;  // Volta
  gpu.bf16 = cc >= 80;               // Ampere: bf16 and TF32 tensor cores
  gpu.tf32 = cc >= 80;
  gpu.arch_listed = !arch_list.empty();
  gpu.arch_supported = !gpu.arch_listed || std::any_of(arch_list.begin(), arch_list.end(), [&](const std::string& arch) {
    int major = 0, minor = 0;
    return std::sscanf(arch.c_str(), "%d.%d", &major, &minor) == 2 && major == gpu.cc_major && minor <= gpu.cc_minor;
  });
}

namespace {

class NoGpuProbe final : public GpuProbe {
 public:
  CudaInfo probe(const std::vector<std::string>& /*arch_list*/) const override {
    CudaInfo info;
    info.compiled = false;
    info.usable = false;
    info.reason = "CUDA not compiled: bellows was built with BELLOWS_WITH_CUDA=OFF; bellows runs on the CPU";
    return info;
  }
};

}  // namespace

std::unique_ptr<GpuProbe> make_no_gpu_probe() { return std::make_unique<NoGpuProbe>(); }

#ifndef BELLOWS_HAVE_CUDA
std::unique_ptr<GpuProbe> make_gpu_probe() { return make_no_gpu_probe(); }
#endif

int local_gpu_index(int count) {
  if (count <= 1) return 0;
  for (const char* name : {"LOCAL_RANK", "SLURM_LOCALID", "OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID"}) {
    const char* v = std::getenv(name);
    if (v == nullptr || *v == '\0') continue;
    char* end = nullptr;
    const long rank = std::strtol(v, &end, 10);
    if (*end != '\0' || rank < 0) return 0;
    return rank < count ? static_cast<int>(rank) : 0;
  }
  return 0;
}

void probe_devices(const CudaDeviceCalls& calls, int count, int local, const std::vector<std::string>& arch_list, CudaInfo& info) {
  std::int64_t local_free = -1;
  if (calls.select(local)) {
    std::int64_t free_bytes = 0;
    if (calls.free_memory(free_bytes)) local_free = free_bytes;
  }
  for (int i = 0; i < count; ++i) {
    GpuInfo gpu;
    gpu.index = i;
    calls.properties(i, gpu);
    gpu.free_memory_known = i == local && local_free >= 0;
    gpu.free_memory_bytes = gpu.free_memory_known ? local_free : gpu.total_memory_bytes;
    derive_gpu_features(gpu, arch_list);
    info.gpus.push_back(std::move(gpu));
  }
}

const GpuInfo* first_supported_gpu(const CudaInfo& cuda) {
  if (!cuda.usable) return nullptr;
  for (const auto& gpu : cuda.gpus) {
    if (gpu.arch_supported) return &gpu;
  }
  return nullptr;
}

}  // namespace bellows::hw
