// The machine, probed once per process into an immutable object that the rest of bellows reads.
#pragma once

#include <string>
#include <vector>

#include "bellows/hw/cpu_info.h"        // defines: CpuInfo, MemoryInfo, IsaFeatures
#include "bellows/hw/gpu_info.h"        // defines: CudaInfo, GpuInfo
#include "bellows/hw/gpu_probe.h"       // defines: GpuProbe
#include "bellows/hw/recommendation.h"  // defines: Recommendation
#include "bellows/hw/torch_build.h"     // defines: TorchBuildInfo

namespace bellows::hw {

inline constexpr int kSchemaVersion = 2;  // of the JSON report, docs/hw.schema.json

struct HardwareInfo {
  std::string bellows_version;
  std::string hostname;
  std::string os;  // kernel name and release
  CpuInfo cpu;
  MemoryInfo memory;
  TorchBuildInfo torch;
  CudaInfo cuda;
  std::vector<Recommendation> recommendations;

  // Probed on first call (thread-safe), then the same object for the life of the process.
  static const HardwareInfo& get();

  // A fresh probe with the given GPU probe; for tests and tools that need an uncached view.
  static HardwareInfo probe(const GpuProbe& gpu_probe);
};

}  // namespace bellows::hw
