// Assembles HardwareInfo from the CPU, memory, LibTorch and GPU probes, once per process.
#include "bellows/hw/hardware_info.h"

#include <sys/utsname.h>
#include <unistd.h>

#include "bellows/version.h"

namespace bellows::hw {

HardwareInfo HardwareInfo::probe(const GpuProbe& gpu_probe) {
  HardwareInfo info;
  info.bellows_version = BELLOWS_VERSION;
  char host[256] = {};
  if (gethostname(host, sizeof(host) - 1) == 0) info.hostname = host;
  utsname uts{};
  if (uname(&uts) == 0) info.os = std::string(uts.sysname) + " " + uts.release + " " + uts.machine;
  info.cpu = probe_cpu();
  info.memory = probe_memory();
  info.torch = probe_torch_build();
  info.cuda = gpu_probe.probe(info.torch.cuda_arch_list);
  info.recommendations = recommend(info);
  return info;
}

const HardwareInfo& HardwareInfo::get() {
  static const HardwareInfo info = probe(*make_gpu_probe());  // C++11 guarantees one thread-safe init
  return info;
}

}  // namespace bellows::hw
