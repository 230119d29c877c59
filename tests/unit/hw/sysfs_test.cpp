// procfs/sysfs parsing, on literal text and on a fixture tree that stands in for / (tests/data/fakeroot).
#include <gtest/gtest.h>

#include "bellows/hw/cpu_info.h"
#include "hw/sysfs.h"
#include "test_paths.h"

namespace bellows::hw {
namespace {

TEST(Sysfs, CpuList) {
  EXPECT_EQ(sysfs::parse_cpu_list("0-3,8,10-11\n"), (std::set<int>{0, 1, 2, 3, 8, 10, 11}));
  EXPECT_EQ(sysfs::parse_cpu_list("5"), (std::set<int>{5}));
  EXPECT_EQ(sysfs::parse_cpu_list(""), (std::set<int>{}));
  EXPECT_EQ(sysfs::parse_cpu_list("3-1"), std::nullopt);
  EXPECT_EQ(sysfs::parse_cpu_list("a-b"), std::nullopt);
  EXPECT_EQ(sysfs::parse_cpu_list("1,,2"), std::nullopt);
}

TEST(Sysfs, CacheSize) {
  EXPECT_EQ(sysfs::parse_size("32K"), 32 * 1024);
  EXPECT_EQ(sysfs::parse_size("2048K\n"), 2048 * 1024);
  EXPECT_EQ(sysfs::parse_size("32M"), 32LL << 20);
  EXPECT_EQ(sysfs::parse_size("12"), 12);
  EXPECT_EQ(sysfs::parse_size("K"), std::nullopt);
  EXPECT_EQ(sysfs::parse_size("3X"), std::nullopt);
}

TEST(Sysfs, KeyValuesStopAtFirstBlock) {
  const auto kv = sysfs::parse_key_values("processor\t: 0\nmodel name\t: X  \n\nprocessor\t: 1\nmodel name\t: Y\n");
  EXPECT_EQ(kv.at("processor"), "0");
  EXPECT_EQ(kv.at("model name"), "X");
}

const std::filesystem::path kFakeRoot = BELLOWS_TEST_DATA_DIR + "/fakeroot";

TEST(FakeRoot, CpuTopologyCachesAndLimits) {
  const CpuInfo cpu = probe_cpu(kFakeRoot);
  EXPECT_EQ(cpu.vendor, "GenuineIntel");
  EXPECT_EQ(cpu.model_name, "Intel(R) Xeon(R) Platinum 8480+");
  EXPECT_EQ(cpu.family, 6);
  EXPECT_EQ(cpu.model, 143);
  EXPECT_EQ(cpu.stepping, 8);
  EXPECT_EQ(cpu.logical_cores, 4);   // online: 0-3
  EXPECT_EQ(cpu.physical_cores, 2);  // two hyper-threads per core
  EXPECT_EQ(cpu.sockets, 1);
  EXPECT_EQ(cpu.numa_nodes, 2);
  ASSERT_TRUE(cpu.cgroup_cpu_limit.has_value());
  EXPECT_DOUBLE_EQ(*cpu.cgroup_cpu_limit, 1.5);
  ASSERT_EQ(cpu.caches.size(), 2u);  // L1d (per core) and L3 (shared)
  EXPECT_EQ(cpu.caches[0].level, 1);
  EXPECT_EQ(cpu.caches[0].size_bytes, 48 * 1024);
  EXPECT_EQ(cpu.caches[0].shared_by_cpus, 2);
  EXPECT_EQ(cpu.caches[0].instances, 2);
  EXPECT_EQ(cpu.caches[1].level, 3);
  EXPECT_EQ(cpu.caches[1].size_bytes, 105LL << 20);
  EXPECT_EQ(cpu.caches[1].instances, 1);
}

TEST(FakeRoot, Memory) {
  const MemoryInfo mem = probe_memory(kFakeRoot);
  EXPECT_EQ(mem.total_bytes, 16384000LL * 1024);
  EXPECT_EQ(mem.available_bytes, 12000000LL * 1024);
  ASSERT_TRUE(mem.cgroup_limit_bytes.has_value());
  EXPECT_EQ(*mem.cgroup_limit_bytes, 8589934592LL);
}

TEST(FakeRoot, MissingFilesGiveUnknownsNotErrors) {
  const auto empty = std::filesystem::path(BELLOWS_TEST_DATA_DIR) / "no-such-root";
  const MemoryInfo mem = probe_memory(empty);
  EXPECT_EQ(mem.total_bytes, 0);
  EXPECT_FALSE(mem.cgroup_limit_bytes.has_value());
  const CpuInfo cpu = probe_cpu(empty);
  EXPECT_EQ(cpu.logical_cores, 0);
  EXPECT_EQ(cpu.numa_nodes, 1);
}

}  // namespace
}  // namespace bellows::hw
