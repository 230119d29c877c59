// What the host CPU and memory offer for training: identity, topology, caches, the instruction sets that
// decide which kernels and precisions are fast (CPUID, checked against what the OS enables), and memory.
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "bellows/hw/onednn_cap.h"

namespace bellows::hw {

// Instruction sets that matter for training kernels. A flag is true only when the CPU reports it (CPUID)
// and the operating system has enabled the register state it needs (XCR0), i.e. when code can use it.
struct IsaFeatures {
  bool sse4_2 = false;
  bool avx = false;
  bool avx2 = false;
  bool fma = false;
  bool f16c = false;
  bool avx512f = false;
  bool avx512dq = false;
  bool avx512bw = false;
  bool avx512vl = false;
  bool avx512_vnni = false;
  bool avx512_bf16 = false;
  bool avx512_fp16 = false;
  bool avx_vnni = false;
  bool amx_tile = false;
  bool amx_bf16 = false;
  bool amx_int8 = false;

  // (name, present) in a fixed order; names are the Linux /proc/cpuinfo flag spellings.
  std::vector<std::pair<std::string, bool>> list() const;
};

struct CacheInfo {
  int level = 0;
  std::string type;          // "Data", "Instruction", "Unified"
  std::int64_t size_bytes = 0;
  int shared_by_cpus = 0;    // logical CPUs sharing one instance
  int instances = 0;         // distinct instances among the online CPUs
};

struct CpuInfo {
  std::string vendor;        // "GenuineIntel", "AuthenticAMD", ...
  std::string model_name;
  int family = 0;
  int model = 0;
  int stepping = 0;
  int sockets = 0;
  int physical_cores = 0;    // distinct (package, core) pairs among online CPUs
  int logical_cores = 0;     // online CPUs (sysconf _SC_NPROCESSORS_ONLN)
  int usable_cpus = 0;       // CPUs this process may run on (affinity mask)
  std::optional<double> cgroup_cpu_limit;  // cgroup v2 cpu.max quota/period, when set
  int numa_nodes = 0;
  std::vector<CacheInfo> caches;
  IsaFeatures isa;
  std::optional<OnednnIsaCap> onednn_cap;  // ONEDNN_MAX_CPU_ISA / DNNL_MAX_CPU_ISA, when this process sets one
};

// The ISA that LibTorch's matmuls and convolutions (oneDNN) may use in this process: `isa`, with AVX512_BF16,
// AVX512_FP16 and AMX cleared where `onednn_cap` keeps oneDNN off them. What bf16's speed follows.
IsaFeatures kernel_isa(const CpuInfo& cpu);

struct MemoryInfo {
  std::int64_t total_bytes = 0;      // MemTotal
  std::int64_t available_bytes = 0;  // MemAvailable
  std::optional<std::int64_t> cgroup_limit_bytes;  // cgroup v2 memory.max, when set
};

// Probes read procfs/sysfs under `root` (tests point it at a fixture tree); CPUID is always the real CPU.
CpuInfo probe_cpu(const std::filesystem::path& root = "/");
MemoryInfo probe_memory(const std::filesystem::path& root = "/");

// The ISA as this CPU's CPUID and XCR0 report it.
IsaFeatures probe_isa();

}  // namespace bellows::hw
