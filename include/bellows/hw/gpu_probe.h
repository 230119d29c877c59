// The seam between CUDA and the rest of the hardware probe: a CUDA implementation (compiled only with
// BELLOWS_WITH_CUDA) and a CPU twin that reports why no GPU is used. Tests substitute their own.
#pragma once

#include <memory>
#include <vector>

#include "bellows/hw/gpu_info.h"  // defines: CudaInfo, GpuInfo

namespace bellows::hw {

class GpuProbe {
 public:
  virtual ~GpuProbe() = default;
  // `arch_list` is LibTorch's compiled CUDA architectures ("8.0", "9.0", ...), to flag unsupported GPUs.
  virtual CudaInfo probe(const std::vector<std::string>& arch_list) const = 0;
};

// The CUDA probe when bellows was built with CUDA, else the CPU twin.
std::unique_ptr<GpuProbe> make_gpu_probe();

// The CPU twin: reports CUDA as not compiled, with the reason.
std::unique_ptr<GpuProbe> make_no_gpu_probe();

}  // namespace bellows::hw
