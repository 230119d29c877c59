// The probe agrees with what Linux itself reports: /proc/cpuinfo (read here independently), sysconf and
// /proc/meminfo. CPUID-derived ISA flags must match the kernel's flags, which it also gates on OS support.
#include <gtest/gtest.h>
#include <unistd.h>

#include <fstream>
#include <set>
#include <sstream>

#include "bellows/hw/hardware_info.h"

namespace bellows::hw {
namespace {

struct ProcCpuinfo {
  std::string model_name, vendor;
  std::set<std::string> flags;
  std::set<std::pair<std::string, std::string>> cores;  // (physical id, core id)
};

ProcCpuinfo read_proc_cpuinfo() {
  ProcCpuinfo out;
  std::ifstream in("/proc/cpuinfo");
  std::string line, physical;
  while (std::getline(in, line)) {
    const auto colon = line.find(':');
    if (colon == std::string::npos) continue;
    std::string key = line.substr(0, line.find_last_not_of(" \t", colon - 1) + 1);
    std::string value = colon + 2 <= line.size() ? line.substr(colon + 2) : "";
    if (key == "model name" && out.model_name.empty()) out.model_name = value;
    if (key == "vendor_id" && out.vendor.empty()) out.vendor = value;
    if (key == "physical id") physical = value;
    if (key == "core id") out.cores.emplace(physical, value);
    if (key == "flags" && out.flags.empty()) {
      std::istringstream words(value);
      for (std::string w; words >> w;) out.flags.insert(w);
    }
  }
  return out;
}

std::int64_t meminfo_kib(const std::string& key) {
  std::ifstream in("/proc/meminfo");
  std::string name;
  std::int64_t value = 0;
  std::string unit;
  while (in >> name >> value >> unit) {
    if (name == key + ":") return value;
  }
  return -1;
}

TEST(CpuProbe, AgreesWithProcCpuinfo) {
  const ProcCpuinfo proc = read_proc_cpuinfo();
  const CpuInfo cpu = probe_cpu();
  EXPECT_EQ(cpu.model_name, proc.model_name);
  EXPECT_EQ(cpu.vendor, proc.vendor);
  if (!proc.cores.empty()) EXPECT_EQ(cpu.physical_cores, static_cast<int>(proc.cores.size()));
}

TEST(CpuProbe, IsaFlagsAgreeWithKernelFlags) {
#if !(defined(__x86_64__) || defined(__i386__))
  GTEST_SKIP() << "ISA flags are probed with CPUID on x86 only";
#endif
  const ProcCpuinfo proc = read_proc_cpuinfo();
  ASSERT_FALSE(proc.flags.empty()) << "/proc/cpuinfo has no flags line";
  for (const auto& [name, present] : probe_isa().list()) {
    EXPECT_EQ(present, proc.flags.count(name) == 1) << "flag " << name;
  }
}

TEST(CpuProbe, AgreesWithSysconf) {
  const CpuInfo cpu = probe_cpu();
  EXPECT_EQ(cpu.logical_cores, sysconf(_SC_NPROCESSORS_ONLN));
  EXPECT_GE(cpu.usable_cpus, 1);
  EXPECT_LE(cpu.usable_cpus, cpu.logical_cores);
  EXPECT_LE(cpu.physical_cores, cpu.logical_cores);
  EXPECT_GE(cpu.sockets, 1);
  EXPECT_GE(cpu.numa_nodes, 1);
}

TEST(MemoryProbe, AgreesWithMeminfoAndSysconf) {
  const MemoryInfo mem = probe_memory();
  EXPECT_EQ(mem.total_bytes, meminfo_kib("MemTotal") * 1024);
  const std::int64_t pages = sysconf(_SC_PHYS_PAGES) * sysconf(_SC_PAGESIZE);
  EXPECT_EQ(mem.total_bytes, pages - pages % 1024);  // the kernel reports the same pages in KiB
  EXPECT_GT(mem.available_bytes, 0);
  EXPECT_LE(mem.available_bytes, mem.total_bytes);
}

TEST(HardwareInfo, ProbedOnceAndShared) {
  const HardwareInfo& a = HardwareInfo::get();
  const HardwareInfo& b = HardwareInfo::get();
  EXPECT_EQ(&a, &b);
  EXPECT_FALSE(a.recommendations.empty());
  EXPECT_EQ(a.cpu.logical_cores, sysconf(_SC_NPROCESSORS_ONLN));
}

}  // namespace
}  // namespace bellows::hw
