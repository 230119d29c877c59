// Plan resolution: "auto" settings become concrete with reasons; impossible requests fail clearly.
#include <gtest/gtest.h>

#include "bellows/plan/plan.h"
#include "bellows/util/error.h"

namespace bellows::plan {
namespace {

hw::HardwareInfo cpu_machine(bool bf16) {
  hw::HardwareInfo info;
  info.cpu.physical_cores = info.cpu.logical_cores = info.cpu.usable_cpus = 4;
  info.cpu.isa.avx512_bf16 = bf16;
  info.memory.available_bytes = 8LL << 30;
  info.cuda.reason = "no NVIDIA driver: libcuda.so.1 cannot be loaded; bellows runs on the CPU";
  info.recommendations = hw::recommend(info);
  return info;
}

hw::HardwareInfo gpu_machine(int major) {
  hw::HardwareInfo info = cpu_machine(false);
  info.cuda.compiled = info.cuda.usable = true;
  info.cuda.reason.clear();
  hw::GpuInfo g;
  g.name = "GPU";
  g.cc_major = major;
  hw::derive_gpu_features(g, {"7.5", "8.0", "9.0"});
  g.cc_minor = major == 7 ? 5 : 0;
  hw::derive_gpu_features(g, {"7.5", "8.0", "9.0"});
  info.cuda.gpus.push_back(g);
  info.recommendations = hw::recommend(info);
  return info;
}

std::string reason_of(const Plan& p, const std::string& key) {
  for (const auto& e : p.entries) {
    if (e.key == key) return e.reason;
  }
  return "<missing>";
}

TEST(Plan, AutoOnBf16CpuPicksCpuAndBf16) {
  const Plan p = resolve({}, cpu_machine(true));
  EXPECT_TRUE(p.device.is_cpu());
  EXPECT_EQ(p.precision, "bf16-mixed");
  EXPECT_NE(reason_of(p, "precision").find("AVX512_BF16"), std::string::npos);
  EXPECT_EQ(p.threads, 4);
  EXPECT_FALSE(p.pin_memory);
  EXPECT_FALSE(p.cudnn_benchmark);
  EXPECT_EQ(p.workers, 1);  // 4 cores shared with compute: one worker
  EXPECT_EQ(p.entries.size(), 8u);
}

TEST(Plan, AutoOnPlainCpuPicksFp32) { EXPECT_EQ(resolve({}, cpu_machine(false)).precision, "fp32"); }

TEST(Plan, AutoOnGpus) {
  const Plan ampere = resolve({}, gpu_machine(8));
  EXPECT_TRUE(ampere.device.is_cuda());
  EXPECT_EQ(ampere.precision, "bf16-mixed");
  EXPECT_TRUE(ampere.pin_memory);
  EXPECT_TRUE(ampere.cudnn_benchmark);
  EXPECT_EQ(resolve({}, gpu_machine(7)).precision, "fp16-mixed");
  PlanRequest det;
  det.deterministic = true;
  EXPECT_FALSE(resolve(det, gpu_machine(8)).cudnn_benchmark);
}

TEST(Plan, ExplicitRequestsKeepTheirValueAndSaySo) {
  PlanRequest r;
  r.precision = "tf32";
  r.threads = 3;
  const Plan p = resolve(r, cpu_machine(true));
  EXPECT_EQ(p.precision, "tf32");
  EXPECT_NE(reason_of(p, "precision").find("CUDA only"), std::string::npos);
  EXPECT_EQ(p.threads, 3);
}

TEST(Plan, Fp16OnTheCpuIsKeptWithAWarning) {
  PlanRequest r;
  r.precision = "fp16-mixed";
  const Plan p = resolve(r, cpu_machine(true));
  EXPECT_EQ(p.precision, "fp16-mixed");
  EXPECT_NE(reason_of(p, "precision").find("no fp16 arithmetic (AVX512_FP16)"), std::string::npos) << reason_of(p, "precision");
  EXPECT_EQ(reason_of(resolve(r, gpu_machine(8)), "precision"), "requested");
}

TEST(Plan, ImpossibleRequestsFail) {
  PlanRequest cuda;
  cuda.device = "cuda";
  try {
    resolve(cuda, cpu_machine(true));
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kResource);
    EXPECT_NE(e.message().find("libcuda.so.1"), std::string::npos);
  }
  PlanRequest bad;
  bad.device = "tpu";
  EXPECT_THROW(resolve(bad, cpu_machine(true)), Error);
  PlanRequest conflict;
  conflict.deterministic = true;
  conflict.cudnn_benchmark = "true";
  EXPECT_THROW(resolve(conflict, gpu_machine(8)), Error);
  PlanRequest index;
  index.device = "cuda:3";
  EXPECT_THROW(resolve(index, gpu_machine(8)), Error);
}

}  // namespace
}  // namespace bellows::plan
