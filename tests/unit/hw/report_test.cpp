// The report renders every probed fact: JSON fields equal the in-memory values; text has every section.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "bellows/hw/report.h"

namespace bellows::hw {
namespace {

TEST(Report, JsonMirrorsHardwareInfo) {
  const HardwareInfo& info = HardwareInfo::get();
  const auto doc = nlohmann::json::parse(format_json(info));
  EXPECT_EQ(doc["schema_version"], kSchemaVersion);
  EXPECT_EQ(doc["cpu"]["model_name"], info.cpu.model_name);
  EXPECT_EQ(doc["cpu"]["logical_cores"], info.cpu.logical_cores);
  EXPECT_EQ(doc["cpu"]["isa"]["avx512_bf16"], info.cpu.isa.avx512_bf16);
  EXPECT_EQ(doc["memory"]["total_bytes"], info.memory.total_bytes);
  EXPECT_EQ(doc["torch"]["version"], info.torch.version);
  EXPECT_EQ(doc["cuda"]["usable"], info.cuda.usable);
  EXPECT_EQ(doc["cuda"]["gpus"].size(), info.cuda.gpus.size());
  ASSERT_EQ(doc["recommendations"].size(), info.recommendations.size());
  EXPECT_EQ(doc["recommendations"][0]["key"], info.recommendations[0].key);
  EXPECT_TRUE(doc["peaks"].empty());
}

TEST(Report, JsonWithGpuAndPeaks) {
  HardwareInfo info = HardwareInfo::probe(*make_no_gpu_probe());
  GpuInfo gpu;
  gpu.name = "NVIDIA A100-SXM4-80GB";
  gpu.cc_major = 8;
  gpu.total_memory_bytes = 80LL << 30;
  info.cuda.gpus.push_back(gpu);
  const auto doc = nlohmann::json::parse(format_json(info, {{"matmul_fp32", "cpu", 123.5, "GFLOP/s", "m"}}));
  EXPECT_EQ(doc["cuda"]["gpus"][0]["compute_capability"], "8.0");
  EXPECT_EQ(doc["cuda"]["gpus"][0]["name"], "NVIDIA A100-SXM4-80GB");
  EXPECT_EQ(doc["peaks"][0]["value"], 123.5);
}

TEST(Report, TextHasEverySection) {
  const HardwareInfo& info = HardwareInfo::get();
  const std::string text = format_text(info, {{"memory_copy", "cpu", 42.0, "GB/s", "copy method"}});
  for (const char* section : {"CPU\n", "LibTorch\n", "GPU\n", "Measured peaks\n", "Recommendations\n"}) {
    EXPECT_NE(text.find(section), std::string::npos) << section;
  }
  EXPECT_NE(text.find(info.cpu.model_name), std::string::npos);
  EXPECT_NE(text.find("method: copy method"), std::string::npos);
  for (const auto& r : info.recommendations) EXPECT_NE(text.find(r.reason), std::string::npos) << r.key;
}

}  // namespace
}  // namespace bellows::hw
