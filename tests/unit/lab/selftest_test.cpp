// `bellows selftest` (lab/selftest.h) on this machine's CPU, and its CUDA checks where no GPU is usable; the CUDA
// source files compiled into the library whenever LibTorch has CUDA (util/cuda_units.h).
#include <gtest/gtest.h>

#include <set>

#include "bellows/lab/selftest.h"
#include "bellows/hw/hardware_info.h"
#include "bellows/hw/torch_build.h"
#include "bellows/util/cuda_units.h"
#include "bellows/util/error.h"

namespace bellows::lab {
namespace {

const std::set<std::string> kCudaOnly = {"pinned copy overlaps compute", "CUDA graph replay", "CUDA graph failed capture"};

TEST(Selftest, EveryCpuCheckPassesAndTheCudaOnesSaySkippedWhy) {
  const SelftestReport report = run_selftest("cpu");
  EXPECT_EQ(report.device, "cpu");
  EXPECT_TRUE(report.passed());
  ASSERT_EQ(report.checks.size(), 15u);
  for (const auto& c : report.checks) {
    if (kCudaOnly.count(c.name)) {
      EXPECT_EQ(c.status, "skipped") << c.name;
      EXPECT_EQ(c.detail, "CUDA only (--device cuda)") << c.name;
    } else {
      EXPECT_EQ(c.status, "pass") << c.name << ": " << c.detail;
      EXPECT_FALSE(c.detail.empty()) << c.name;
    }
  }
  // The measurement behind a verdict, not a bare "ok".
  const auto find = [&](const std::string& name) {
    for (const auto& c : report.checks) {
      if (c.name == name) return c.detail;
    }
    return std::string("missing");
  };
  EXPECT_NE(find("autocast bf16").find("mm -> BFloat16, mse_loss -> Float"), std::string::npos) << find("autocast bf16");
  EXPECT_NE(find("loss scaler skip and backoff").find("scale 1024 -> 512"), std::string::npos);
  EXPECT_NE(find("memory statistics").find("current +32.00 MiB"), std::string::npos) << find("memory statistics");
  const std::string table = format_selftest(report);
  EXPECT_NE(table.find("12 passed, 0 failed, 3 skipped"), std::string::npos) << table;
  const nlohmann::json json = selftest_json(report);
  EXPECT_EQ(json["device"], "cpu");
  EXPECT_EQ(json["passed"], true);
  EXPECT_EQ(json["checks"].size(), 15u);
}

TEST(Selftest, CudaWithoutAGpuSkipsEveryDeviceCheckAndPasses) {
  if (hw::HardwareInfo::get().cuda.usable) GTEST_SKIP() << "a GPU is usable here: `bellows selftest --device cuda` runs for real";
  const SelftestReport report = run_selftest("cuda");
  EXPECT_TRUE(report.passed());
  for (const auto& c : report.checks) {
    if (c.name == "build") {
      EXPECT_EQ(c.status, "pass") << c.detail;  // what was compiled needs no GPU to check
    } else {
      EXPECT_EQ(c.status, "skipped") << c.name;
      EXPECT_EQ(c.detail, hw::HardwareInfo::get().cuda.reason) << c.name;
    }
  }
}

TEST(Selftest, AnUnknownDeviceIsAUsageError) {
  try {
    run_selftest("tpu");
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kUsage);
    EXPECT_NE(std::string(e.what()).find("--device tpu: expected cpu, cuda or auto"), std::string::npos) << e.what();
  }
}

// The CUDA code is in the library, not preprocessed away, whenever LibTorch has CUDA and the build asked for it.
TEST(CudaUnits, CompiledInWheneverLibTorchHasCuda) {
  const std::vector<std::string> units = util::cuda_units();
  if (!hw::probe_torch_build().cuda_compiled) {
    EXPECT_TRUE(units.empty());
    return;
  }
#if BELLOWS_TEST_WANT_CUDA
  EXPECT_EQ(units, util::cuda_build_units());
  EXPECT_EQ(units.size(), 6u);  // data/cuda_stager, dist/nccl_backend, hw/gpu_probe_cuda, lab/selftest_cuda, obs/cuda_memory, train/cuda_step_graph
#else
  GTEST_SKIP() << "configured with BELLOWS_WITH_CUDA=OFF";
#endif
}

}  // namespace
}  // namespace bellows::lab
