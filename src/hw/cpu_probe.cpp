// Probes the host CPU (CPUID + procfs/sysfs) and memory (/proc/meminfo + cgroup v2 limits).
// Written by hand: no Debian library reports CPUID features together with the OS-enabled state.
#include <sched.h>
#include <unistd.h>

#include <map>
#include <regex>
#include <set>
#include <tuple>

#include "bellows/hw/cpu_info.h"
#include "hw/sysfs.h"

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#define BELLOWS_X86 1
#endif

namespace bellows::hw {
namespace fs = std::filesystem;

std::vector<std::pair<std::string, bool>> IsaFeatures::list() const {
  return {{"sse4_2", sse4_2},           {"avx", avx},           {"avx2", avx2},
          {"fma", fma},                 {"f16c", f16c},         {"avx512f", avx512f},
          {"avx512dq", avx512dq},       {"avx512bw", avx512bw}, {"avx512vl", avx512vl},
          {"avx512_vnni", avx512_vnni}, {"avx512_bf16", avx512_bf16},
          {"avx512_fp16", avx512_fp16}, {"avx_vnni", avx_vnni}, {"amx_tile", amx_tile},
          {"amx_bf16", amx_bf16},       {"amx_int8", amx_int8}};
}

IsaFeatures probe_isa() {
  IsaFeatures isa;
#ifdef BELLOWS_X86
  unsigned a = 0, b = 0, c = 0, d = 0;
  if (!__get_cpuid_count(1, 0, &a, &b, &c, &d)) return isa;
  const bool osxsave = c & (1u << 27);
  std::uint64_t xcr0 = 0;
  if (osxsave) {
    unsigned lo = 0, hi = 0;
    __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
    xcr0 = (static_cast<std::uint64_t>(hi) << 32) | lo;
  }
  // Register state the OS saves on context switch; without it the instructions fault.
  const bool os_avx = (xcr0 & 0x6) == 0x6;                 // XMM + YMM
  const bool os_avx512 = os_avx && (xcr0 & 0xE0) == 0xE0;  // opmask + ZMM_Hi256 + Hi16_ZMM
  const bool os_amx = (xcr0 & 0x60000) == 0x60000;         // XTILECFG + XTILEDATA

  isa.sse4_2 = c & (1u << 20);
  isa.fma = os_avx && (c & (1u << 12));
  isa.avx = os_avx && (c & (1u << 28));
  isa.f16c = os_avx && (c & (1u << 29));

  unsigned max_leaf = __get_cpuid_max(0, nullptr);
  if (max_leaf >= 7 && __get_cpuid_count(7, 0, &a, &b, &c, &d)) {
    isa.avx2 = os_avx && (b & (1u << 5));
    isa.avx512f = os_avx512 && (b & (1u << 16));
    isa.avx512dq = os_avx512 && (b & (1u << 17));
    isa.avx512bw = os_avx512 && (b & (1u << 30));
    isa.avx512vl = os_avx512 && (b & (1u << 31));
    isa.avx512_vnni = os_avx512 && (c & (1u << 11));
    isa.avx512_fp16 = os_avx512 && (d & (1u << 23));
    isa.amx_bf16 = os_amx && (d & (1u << 22));
    isa.amx_tile = os_amx && (d & (1u << 24));
    isa.amx_int8 = os_amx && (d & (1u << 25));
    const unsigned subleaves = a;
    if (subleaves >= 1 && __get_cpuid_count(7, 1, &a, &b, &c, &d)) {
      isa.avx_vnni = os_avx && (a & (1u << 4));
      isa.avx512_bf16 = os_avx512 && (a & (1u << 5));
    }
  }
#endif
  return isa;
}

namespace {

std::string cpuid_vendor() {
#ifdef BELLOWS_X86
  unsigned a = 0, b = 0, c = 0, d = 0;
  if (__get_cpuid(0, &a, &b, &c, &d)) {
    char v[13] = {};
    std::memcpy(v, &b, 4);
    std::memcpy(v + 4, &d, 4);
    std::memcpy(v + 8, &c, 4);
    return v;
  }
#endif
  return {};
}

std::string cpuid_brand() {
#ifdef BELLOWS_X86
  if (__get_cpuid_max(0x80000000, nullptr) >= 0x80000004) {
    unsigned regs[12] = {};
    for (unsigned i = 0; i < 3; ++i) {
      __get_cpuid(0x80000002 + i, &regs[4 * i], &regs[4 * i + 1], &regs[4 * i + 2], &regs[4 * i + 3]);
    }
    char brand[49] = {};
    std::memcpy(brand, regs, 48);
    return sysfs::trim(brand);
  }
#endif
  return {};
}

int to_int(const std::map<std::string, std::string>& kv, const std::string& key) {
  auto it = kv.find(key);
  if (it == kv.end()) return 0;
  try {
    return std::stoi(it->second);
  } catch (...) {
    return 0;
  }
}

std::set<int> online_cpus(const fs::path& root) {
  auto text = sysfs::read_first_line(root / "sys/devices/system/cpu/online");
  if (text) {
    if (auto cpus = sysfs::parse_cpu_list(*text)) return *cpus;
  }
  std::set<int> cpus;
  if (root == "/") {
    const long n = sysconf(_SC_NPROCESSORS_ONLN);
    for (long i = 0; i < n; ++i) cpus.insert(static_cast<int>(i));
  }
  return cpus;
}

// The cgroup v2 directory of this process, or the cgroup root when it cannot be told.
fs::path cgroup_dir(const fs::path& root) {
  const fs::path base = root / "sys/fs/cgroup";
  if (auto text = sysfs::read_file(root / "proc/self/cgroup")) {
    const auto pos = text->find("0::");
    if (pos != std::string::npos) {
      const auto eol = text->find('\n', pos);
      std::string rel = text->substr(pos + 3, eol == std::string::npos ? std::string::npos : eol - pos - 3);
      while (!rel.empty() && rel.front() == '/') rel.erase(rel.begin());
      if (!rel.empty() && fs::exists(base / rel)) return base / rel;
    }
  }
  return base;
}

std::optional<double> cgroup_cpu_limit(const fs::path& root) {
  auto line = sysfs::read_first_line(cgroup_dir(root) / "cpu.max");
  if (!line) return std::nullopt;
  const auto space = line->find(' ');
  if (space == std::string::npos || line->compare(0, space, "max") == 0) return std::nullopt;
  try {
    const double quota = std::stod(line->substr(0, space));
    const double period = std::stod(line->substr(space + 1));
    if (quota > 0 && period > 0) return quota / period;
  } catch (...) {
  }
  return std::nullopt;
}

void probe_topology(const fs::path& root, CpuInfo& cpu) {
  const std::set<int> online = online_cpus(root);
  cpu.logical_cores = static_cast<int>(online.size());
  std::set<std::pair<std::int64_t, std::int64_t>> cores;
  std::set<std::int64_t> packages;
  // (level, type, shared list) identifies one cache instance.
  std::map<std::tuple<int, std::string, std::string>, CacheInfo> caches;
  for (int id : online) {
    const fs::path dir = root / "sys/devices/system/cpu" / ("cpu" + std::to_string(id));
    const auto package = sysfs::read_int(dir / "topology/physical_package_id");
    const auto core = sysfs::read_int(dir / "topology/core_id");
    if (package && core) {
      cores.emplace(*package, *core);
      packages.insert(*package);
    }
    for (int index = 0;; ++index) {
      const fs::path cache = dir / "cache" / ("index" + std::to_string(index));
      const auto level = sysfs::read_int(cache / "level");
      if (!level) break;
      const std::string type = sysfs::read_first_line(cache / "type").value_or("");
      const std::string shared = sysfs::read_first_line(cache / "shared_cpu_list").value_or("");
      auto [it, fresh] = caches.try_emplace({static_cast<int>(*level), type, shared});
      if (fresh) {
        it->second.level = static_cast<int>(*level);
        it->second.type = type;
        it->second.size_bytes = sysfs::parse_size(sysfs::read_first_line(cache / "size").value_or("")).value_or(0);
        const auto sharers = sysfs::parse_cpu_list(shared);
        it->second.shared_by_cpus = sharers ? static_cast<int>(sharers->size()) : 1;
      }
    }
  }
  cpu.physical_cores = cores.empty() ? cpu.logical_cores : static_cast<int>(cores.size());
  cpu.sockets = packages.empty() ? 1 : static_cast<int>(packages.size());
  std::map<std::pair<int, std::string>, CacheInfo> merged;
  for (const auto& [key, cache] : caches) {
    auto [it, fresh] = merged.try_emplace({cache.level, cache.type}, cache);
    if (!fresh) it->second.size_bytes = std::max(it->second.size_bytes, cache.size_bytes);
    it->second.instances += 1;
  }
  for (auto& [key, cache] : merged) cpu.caches.push_back(cache);
}

int count_numa_nodes(const fs::path& root) {
  const fs::path dir = root / "sys/devices/system/node";
  std::error_code ec;
  int nodes = 0;
  static const std::regex node_name("node[0-9]+");
  for (const auto& entry : fs::directory_iterator(dir, ec)) {
    if (std::regex_match(entry.path().filename().string(), node_name)) ++nodes;
  }
  return nodes > 0 ? nodes : 1;
}

}  // namespace

CpuInfo probe_cpu(const fs::path& root) {
  CpuInfo cpu;
  const auto kv = sysfs::parse_key_values(sysfs::read_file(root / "proc/cpuinfo").value_or(""));
  auto get = [&](const std::string& key) {
    auto it = kv.find(key);
    return it == kv.end() ? std::string() : it->second;
  };
  cpu.vendor = get("vendor_id");
  cpu.model_name = get("model name");
  if (cpu.vendor.empty()) cpu.vendor = cpuid_vendor();
  if (cpu.model_name.empty()) cpu.model_name = cpuid_brand();
  cpu.family = to_int(kv, "cpu family");
  cpu.model = to_int(kv, "model");
  cpu.stepping = to_int(kv, "stepping");
  probe_topology(root, cpu);
  cpu.usable_cpus = cpu.logical_cores;
  if (root == "/") {
    cpu_set_t set;
    CPU_ZERO(&set);
    if (sched_getaffinity(0, sizeof(set), &set) == 0) cpu.usable_cpus = CPU_COUNT(&set);
  }
  cpu.cgroup_cpu_limit = cgroup_cpu_limit(root);
  cpu.numa_nodes = count_numa_nodes(root);
  cpu.isa = probe_isa();
  cpu.onednn_cap = onednn_isa_cap();
  return cpu;
}

IsaFeatures kernel_isa(const CpuInfo& cpu) {
  IsaFeatures isa = cpu.isa;
  if (!cpu.onednn_cap) return isa;
  isa.avx512_bf16 = isa.avx512_bf16 && cpu.onednn_cap->avx512_bf16;
  isa.avx512_fp16 = isa.avx512_fp16 && cpu.onednn_cap->avx512_fp16;
  if (!cpu.onednn_cap->amx) isa.amx_tile = isa.amx_bf16 = isa.amx_int8 = false;
  return isa;
}

MemoryInfo probe_memory(const fs::path& root) {
  MemoryInfo memory;
  const auto kv = sysfs::parse_key_values(sysfs::read_file(root / "proc/meminfo").value_or(""));
  auto kib = [&](const std::string& key) -> std::int64_t {
    auto it = kv.find(key);
    if (it == kv.end()) return 0;
    return static_cast<std::int64_t>(std::stoll(it->second)) * 1024;  // "123456 kB"
  };
  memory.total_bytes = kib("MemTotal");
  memory.available_bytes = kib("MemAvailable");
  if (auto limit = sysfs::read_int(cgroup_dir(root) / "memory.max")) memory.cgroup_limit_bytes = *limit;
  return memory;
}

}  // namespace bellows::hw
