// The GPU probe's CPU twin and the factory that picks the CUDA probe when bellows was built with CUDA.
#include "bellows/hw/gpu_probe.h"

#include <algorithm>
#include <cstdio>

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

const GpuInfo* first_supported_gpu(const CudaInfo& cuda) {
  if (!cuda.usable) return nullptr;
  for (const auto& gpu : cuda.gpus) {
    if (gpu.arch_supported) return &gpu;
  }
  return nullptr;
}

}  // namespace bellows::hw
