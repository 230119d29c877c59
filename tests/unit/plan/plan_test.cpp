// Plan resolution: "auto" settings become concrete with reasons; impossible requests fail clearly.
#include <ATen/Parallel.h>
#include <gtest/gtest.h>

#include <cstdlib>

#include "bellows/plan/plan.h"
#include "bellows/util/error.h"
#include "test_util.h"

namespace bellows::plan {
namespace {

using test_support::error_from;

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
  EXPECT_TRUE(p.workers_planned);
  EXPECT_EQ(p.entries.size(), 9u);
}

// glibc keeps freed memory for the next step, bounded by a quarter of the RAM; "system" leaves glibc alone;
// anything else is a config error naming the choices.
TEST(Plan, CpuAllocatorRetainsFreedMemoryUnlessToldNot) {
  hw::HardwareInfo small = cpu_machine(false);
  small.memory.total_bytes = 2LL << 30;
  const Plan p = resolve({}, small);
#if defined(__GLIBC__)
  EXPECT_EQ(p.retain_bytes, 512LL << 20);
  EXPECT_NE(reason_of(p, "cpu_allocator").find("kept for the next step"), std::string::npos);
  hw::HardwareInfo big = cpu_machine(false);
  big.memory.total_bytes = 64LL << 30;
  EXPECT_EQ(resolve({}, big).retain_bytes, 1LL << 30);
#endif
  PlanRequest system;
  system.cpu_allocator = "system";
  const Plan s = resolve(system, small);
  EXPECT_EQ(s.retain_bytes, 0);
  EXPECT_NE(reason_of(s, "cpu_allocator").find("requested"), std::string::npos);
  PlanRequest bad;
  bad.cpu_allocator = "jemalloc";
  try {
    resolve(bad, small);
    FAIL() << "accepted cpu_allocator jemalloc";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kConfig);
    EXPECT_NE(e.hint().find("auto, retain, system"), std::string::npos);
  }
}

// Planned workers give way to the training thread when a batch is cheap to fetch and compute takes every core;
// an expensive batch keeps them (with the cost in the reason); requested counts and GPU runs are left alone.
void refine(Plan& plan, const hw::HardwareInfo& hw, double batch_fetch_ms) {
  if (const auto row = refine_workers(plan, hw, batch_fetch_ms)) plan.revise(*row);
}

TEST(Plan, RefineWorkersByTheMeasuredBatchCost) {
  const hw::HardwareInfo cpu = cpu_machine(false);
  Plan cheap = resolve({}, cpu);
  refine(cheap, cpu, 0.11);
  EXPECT_EQ(cheap.workers, 0);
  EXPECT_NE(reason_of(cheap, "workers").find("a batch takes 0.11 ms to fetch (measured): cheaper in the training thread"),
            std::string::npos) << reason_of(cheap, "workers");
  Plan costly = resolve({}, cpu);
  refine(costly, cpu, 12.5);
  EXPECT_EQ(costly.workers, 1);
  EXPECT_NE(reason_of(costly, "workers").find("; a batch takes 12.50 ms to fetch (measured)"), std::string::npos);
  PlanRequest two;
  two.workers = 2;
  Plan requested = resolve(two, cpu);
  refine(requested, cpu, 0.01);
  EXPECT_EQ(requested.workers, 2);
  EXPECT_EQ(reason_of(requested, "workers"), "requested");
  PlanRequest fewer_threads;
  fewer_threads.threads = 2;  // two of four cores left for loading
  Plan spare = resolve(fewer_threads, cpu);
  refine(spare, cpu, 0.01);
  EXPECT_EQ(spare.workers, 1);
  const hw::HardwareInfo gpu = gpu_machine(8);
  Plan on_gpu = resolve({}, gpu);
  const int planned = on_gpu.workers;
  refine(on_gpu, gpu, 0.01);
  EXPECT_EQ(on_gpu.workers, planned);
}

// data.on_device: auto keeps in-memory data on a GPU when it takes at most a quarter of the budget; never on the CPU;
// data read per sample stays with the loader, and asking for it on the device names the dataset.
TEST(Plan, DataPlacementByTheDataBytesAgainstTheDeviceBudget) {
  const Plan gpu = resolve({}, gpu_machine(9));
  ASSERT_EQ(gpu.on_device, "auto");
  const std::int64_t budget = 1000LL * 1000 * 1000;
  const PlanEntry fits = plan_data_placement(gpu, budget / 4, "", budget);
  EXPECT_EQ(fits.key, "on_device");
  EXPECT_EQ(fits.value, "true");
  EXPECT_EQ(fits.reason, "the data (250.0 MB) fits in 25% of cuda:0's 1000.0 MB budget: placed there once, batches gathered on the device "
                         "(no per-step collation, copy or stager)");
  const PlanEntry large = plan_data_placement(gpu, budget / 4 + 1, "", budget);
  EXPECT_EQ(large.value, "false");
  EXPECT_NE(large.reason.find("more than 25% of cuda:0's 1000.0 MB budget"), std::string::npos) << large.reason;
  const PlanEntry images = plan_data_placement(gpu, -1, "image folder data/train", budget);
  EXPECT_EQ(images.value, "false");
  EXPECT_NE(images.reason.find("image folder data/train is read and decoded per sample"), std::string::npos) << images.reason;

  const Plan cpu = resolve({}, cpu_machine(false));
  const PlanEntry host = plan_data_placement(cpu, 1000, "", budget);
  EXPECT_EQ(host.value, "false");
  EXPECT_NE(host.reason.find("the device is the host"), std::string::npos) << host.reason;

  PlanRequest forced;
  forced.on_device = "true";
  const Plan asked = resolve(forced, cpu_machine(false));
  EXPECT_EQ(plan_data_placement(asked, 3'000'000, "", budget).value, "true");  // the CPU twin, as the tests run it
  EXPECT_EQ(plan_data_placement(asked, 2 * budget, "", budget).value, "true");  // asked for: no budget rule
  const Error e = error_from([&] { plan_data_placement(asked, -1, "image folder data/train", budget); });
  EXPECT_EQ(e.kind(), ErrorKind::kConfig);
  EXPECT_NE(std::string(e.what()).find("data.on_device is true, but image folder data/train is read and decoded per sample"), std::string::npos)
      << e.what();
  forced.on_device = "false";
  EXPECT_EQ(plan_data_placement(resolve(forced, gpu_machine(9)), 10, "", budget).value, "false");
  forced.on_device = "yes";
  EXPECT_THROW(resolve(forced, cpu_machine(false)), Error);

  Plan revised = gpu;
  revised.revise(fits);
  EXPECT_EQ(revised.on_device, "true");
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

// deterministic: true on CUDA sets CUBLAS_WORKSPACE_CONFIG (cuBLAS throws at the first matmul of a deterministic
// run without it); one already set to a deterministic value is kept; any other value is a config error. CPU runs
// leave it alone.
// One GPU per process of a data-parallel job: cuda:<local rank>, or the only GPU a process sees (a launcher that
// gives each rank its own CUDA_VISIBLE_DEVICES); more ranks than GPUs is refused.
TEST(Plan, EachRankOfANodeTakesItsOwnGpu) {
  PlanRequest r;
  r.local_rank = 1;
  r.local_world_size = 2;
  hw::HardwareInfo two = gpu_machine(9);
  two.cuda.gpus.push_back(two.cuda.gpus.front());
  two.cuda.gpus.back().index = 1;
  EXPECT_EQ(resolve(r, two).device.str(), "cuda:1");
  const Plan alone = resolve(r, gpu_machine(9));
  EXPECT_EQ(alone.device.str(), "cuda:0");
  EXPECT_NE(reason_of(alone, "device").find("local rank 1 of 2 sees one GPU"), std::string::npos) << reason_of(alone, "device");
  r.local_rank = 2;
  r.local_world_size = 3;
  EXPECT_THROW(resolve(r, two), Error);
}

TEST(Plan, DeterministicCudaRunsSetTheCublasWorkspace) {
  const char* before = std::getenv("CUBLAS_WORKSPACE_CONFIG");
  const std::string saved = before ? before : "";
  ::unsetenv("CUBLAS_WORKSPACE_CONFIG");
  PlanRequest r;
  r.deterministic = true;
  const Plan p = resolve(r, gpu_machine(8));
  ASSERT_TRUE(p.device.is_cuda());
  EXPECT_EQ(p.cublas_workspace_config, ":4096:8");
  EXPECT_NE(reason_of(p, "deterministic").find("CUBLAS_WORKSPACE_CONFIG=:4096:8 (set by bellows)"), std::string::npos);
  EXPECT_NE(p.to_json().find("\"cublas_workspace_config\": \":4096:8\""), std::string::npos);
  EXPECT_EQ(resolve(r, cpu_machine(false)).cublas_workspace_config, "");
  PlanRequest fast;  // not deterministic: nothing to set
  EXPECT_EQ(resolve(fast, gpu_machine(8)).cublas_workspace_config, "");

  // apply() sets it (a CPU plan carrying the value: applying a CUDA plan needs a GPU).
  Plan cpu = resolve({}, cpu_machine(false));
  cpu.cublas_workspace_config = ":4096:8";
  cpu.threads = at::get_num_threads();  // the rest of apply() as this process has it
  cpu.retain_bytes = 0;
  apply(cpu);
  ASSERT_NE(std::getenv("CUBLAS_WORKSPACE_CONFIG"), nullptr);
  EXPECT_STREQ(std::getenv("CUBLAS_WORKSPACE_CONFIG"), ":4096:8");

  ::setenv("CUBLAS_WORKSPACE_CONFIG", ":16:8", 1);
  EXPECT_EQ(resolve(r, gpu_machine(8)).cublas_workspace_config, ":16:8");
  ::setenv("CUBLAS_WORKSPACE_CONFIG", ":0:0", 1);
  try {
    resolve(r, gpu_machine(8));
    ADD_FAILURE() << "accepted CUBLAS_WORKSPACE_CONFIG=:0:0";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kConfig);
    EXPECT_NE(e.message().find("':0:0'"), std::string::npos) << e.message();
  }
  if (saved.empty()) ::unsetenv("CUBLAS_WORKSPACE_CONFIG");
  else ::setenv("CUBLAS_WORKSPACE_CONFIG", saved.c_str(), 1);
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
