// The CUDA GPU probe (compiled only with BELLOWS_WITH_CUDA): driver, runtime, cuDNN and NCCL versions and
// per-device properties, or one line saying why CUDA cannot be used. The CPU twin is in ../gpu_probe.cpp.
#include <ATen/detail/CUDAHooksInterface.h>
#include <cuda_runtime_api.h>
#include <dlfcn.h>
#include <torch/csrc/cuda/nccl.h>

#include <cstdlib>

#include "bellows/hw/gpu_probe.h"
#include "bellows/util/cuda_units.h"  // defines: register_cuda_unit

namespace bellows::hw {
namespace {

std::string cuda_version_string(int v) { return std::to_string(v / 1000) + "." + std::to_string((v % 1000) / 10); }

std::string cudnn_version_string(long v) {
  // cuDNN 9 encodes major*10000 + minor*100 + patch; cuDNN 8 used major*1000 + minor*100 + patch.
  if (v >= 90000) return std::to_string(v / 10000) + "." + std::to_string((v % 10000) / 100) + "." + std::to_string(v % 100);
  return std::to_string(v / 1000) + "." + std::to_string((v % 1000) / 100) + "." + std::to_string(v % 100);
}

std::string nccl_version_string() {
  // torch::cuda::nccl::version() packs major << 32 | minor << 16 | patch.
  const std::uint64_t v = torch::cuda::nccl::version();
  if (v == 0) return {};
  return std::to_string(v >> 32) + "." + std::to_string((v >> 16) & 0xffff) + "." + std::to_string(v & 0xffff);
}

class CudaGpuProbe final : public GpuProbe {
 public:
  CudaInfo probe(const std::vector<std::string>& arch_list) const override {
    CudaInfo info;
    info.compiled = true;
    int runtime = 0;
    if (cudaRuntimeGetVersion(&runtime) == cudaSuccess) info.runtime_version = cuda_version_string(runtime);
    try {
      info.cudnn_version = cudnn_version_string(at::detail::getCUDAHooks().versionCuDNN());
    } catch (...) {  // a LibTorch without cuDNN: leave it empty
    }
    info.nccl_version = nccl_version_string();

    if (void* driver = dlopen("libcuda.so.1", RTLD_LAZY | RTLD_LOCAL); driver == nullptr) {
      info.reason = "no NVIDIA driver: libcuda.so.1 cannot be loaded; bellows runs on the CPU";
      return info;
    }
    int driver_version = 0;
    if (cudaDriverGetVersion(&driver_version) == cudaSuccess && driver_version > 0) {
      info.driver_version = cuda_version_string(driver_version);
    }
    int count = 0;
    if (const cudaError_t err = cudaGetDeviceCount(&count); err != cudaSuccess) {
      info.reason = std::string("CUDA driver present but no usable device: ") + cudaGetErrorString(err) +
                    "; bellows runs on the CPU";
      cudaGetLastError();  // clear the sticky error
      return info;
    }
    if (count == 0) {
      const char* visible = std::getenv("CUDA_VISIBLE_DEVICES");
      info.reason = std::string("no CUDA device visible") +
                    (visible ? std::string(" (CUDA_VISIBLE_DEVICES=") + visible + ")" : std::string()) +
                    "; bellows runs on the CPU";
      return info;
    }
    // This process's GPU becomes its current device before anything else touches one; the others are only read.
    probe_devices(RuntimeCalls{}, count, local_gpu_index(count), arch_list, info);
    info.usable = true;
    return info;
  }

 private:
  struct RuntimeCalls final : CudaDeviceCalls {
    bool properties(int index, GpuInfo& gpu) const override {
      cudaDeviceProp prop{};
      if (cudaGetDeviceProperties(&prop, index) != cudaSuccess) return false;
      gpu.name = prop.name;
      gpu.total_memory_bytes = static_cast<std::int64_t>(prop.totalGlobalMem);
      gpu.cc_major = prop.major;
      gpu.cc_minor = prop.minor;
      gpu.sm_count = prop.multiProcessorCount;
      return true;
    }
    bool select(int index) const override { return cudaSetDevice(index) == cudaSuccess; }
    bool free_memory(std::int64_t& free_bytes) const override {
      std::size_t free = 0, total = 0;
      if (cudaMemGetInfo(&free, &total) != cudaSuccess) return false;
      free_bytes = static_cast<std::int64_t>(free);
      return true;
    }
  };
};

}  // namespace

std::unique_ptr<GpuProbe> make_gpu_probe() { return std::make_unique<CudaGpuProbe>(); }

}  // namespace bellows::hw

namespace {
const bool kRegisteredGpuProbe = bellows::util::register_cuda_unit("hw/gpu_probe_cuda");  // util/cuda_units.h
}  // namespace
