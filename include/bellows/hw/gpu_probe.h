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

// The CUDA runtime calls that touch devices, as the CUDA probe makes them: a seam, so that a test can see which
// devices the probe touches. Properties need no context; select (cudaSetDevice) creates the device's context.
class CudaDeviceCalls {
 public:
  virtual ~CudaDeviceCalls() = default;
  virtual bool properties(int index, GpuInfo& gpu) const = 0;  // name, total memory, compute capability, SMs
  virtual bool select(int index) const = 0;                     // makes `index` this thread's (and process's) device
  virtual bool free_memory(std::int64_t& free_bytes) const = 0;  // of the selected device
};

// This process's GPU among `count` visible ones, before anything has chosen it: the launcher's local rank
// (LOCAL_RANK from torchrun and bellows launch, SLURM_LOCALID, OMPI_COMM_WORLD_LOCAL_RANK, MPI_LOCALRANKID; the
// variables dist/environment.cpp reads), or 0. A process that sees one GPU uses it (a launcher that gives each
// rank its own CUDA_VISIBLE_DEVICES); a local rank beyond the GPUs is left to the plan to refuse: 0 here.
int local_gpu_index(int count);

// Fills info.gpus for `count` devices: selects `local` first (the one context this process needs), asks its free
// memory there, and reads every device's properties, which needs no context: no other GPU is touched.
void probe_devices(const CudaDeviceCalls& calls, int count, int local, const std::vector<std::string>& arch_list, CudaInfo& info);

}  // namespace bellows::hw
