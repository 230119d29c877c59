// What the CUDA devices offer, or why there are none usable. Filled by a GpuProbe (gpu_probe.h).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace bellows::hw {

struct GpuInfo {
  int index = 0;
  std::string name;
  std::int64_t total_memory_bytes = 0;
  std::int64_t free_memory_bytes = 0;  // when !free_memory_known: the total (an upper bound)
  // Free memory is asked of this process's own GPU only (cudaMemGetInfo needs a context there, and a context on
  // every GPU of a node in every rank costs each GPU memory per rank): other GPUs' is not queried.
  bool free_memory_known = false;
  int cc_major = 0;
  int cc_minor = 0;
  int sm_count = 0;
  bool bf16 = false;               // native bf16 tensor cores (sm_80+)
  bool tf32 = false;               // TF32 tensor-core matmul (sm_80+)
  bool fp16_tensor_cores = false;  // fp16 tensor cores (sm_70+)
  bool arch_supported = false;     // LibTorch has kernels that run here (same major, minor <= device's)
  bool arch_listed = false;        // LibTorch's build configuration lists its architectures (2.11's lists none)
};

// Tensor-core features from the compute capability (NVIDIA's CUDA programming guide), and whether LibTorch's
// compiled architectures ("8.0", "8.6", "9.0", ...) include one this device runs: a cubin for sm_XY runs on
// devices of the same major version and minor >= Y. An empty list (torch 2.11's build configuration has no
// CUDA_FLAGS) cannot tell: the device counts as supported, arch_listed is false, and a kernel without an image for
// it fails at its first launch with CUDA's own error.
void derive_gpu_features(GpuInfo& gpu, const std::vector<std::string>& arch_list);

struct CudaInfo {
  bool compiled = false;  // bellows and LibTorch were built with CUDA
  bool usable = false;    // at least one device can run kernels
  std::string reason;     // when not usable: why, in one line
  std::string driver_version;   // e.g. "13.0" (the driver's supported CUDA version)
  std::string runtime_version;  // CUDA runtime loaded
  std::string cudnn_version;
  std::string nccl_version;
  std::vector<GpuInfo> gpus;
};

// The first device LibTorch has kernels for, when CUDA is usable; null otherwise. The GPU the recommendations
// and the hardware profiles speak of.
const GpuInfo* first_supported_gpu(const CudaInfo& cuda);

}  // namespace bellows::hw
