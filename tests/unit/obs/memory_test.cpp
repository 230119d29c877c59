// The counting CPU allocator: tensors' bytes are counted while they live, the peak holds until reset, and
// activation checkpointing's saving shows in it.
#include "bellows/obs/memory.h"

#include <ATen/ATen.h>
#include <c10/core/CPUAllocator.h>
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <nlohmann/json.hpp>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "bellows/models/activation_checkpoint.h"
#include "bellows/obs/profile.h"
#include "bellows/util/error.h"

namespace bellows::obs {
namespace {

const c10::Device kCpu(c10::kCPU);

TEST(Memory, CountsTensorBytesAndThePeak) {
  ASSERT_TRUE(install_cpu_tracking());
  ASSERT_TRUE(install_cpu_tracking());  // idempotent
  const std::int64_t before = memory_stats(kCpu).current_bytes;
  reset_peak(kCpu);
  {
    const at::Tensor a = at::empty({1 << 20}, at::kFloat);  // 4 MiB
    EXPECT_EQ(memory_stats(kCpu).current_bytes - before, 4 << 20);
    {
      const at::Tensor b = at::ones({1 << 18}, at::kDouble);  // 2 MiB
      EXPECT_EQ(memory_stats(kCpu).current_bytes - before, 6 << 20);
    }
    EXPECT_EQ(memory_stats(kCpu).current_bytes - before, 4 << 20);
  }
  const MemoryStats s = memory_stats(kCpu);
  EXPECT_TRUE(s.tracked);
  EXPECT_EQ(s.current_bytes, before);
  EXPECT_EQ(s.peak_bytes - before, 6 << 20);
  reset_peak(kCpu);
  EXPECT_EQ(memory_stats(kCpu).peak_bytes, memory_stats(kCpu).current_bytes);
  // The session peak outlives reset_peak, until its own reset.
  EXPECT_GE(memory_stats(kCpu).session_peak_bytes - before, 6 << 20);
  reset_session_peak(kCpu);
  EXPECT_EQ(memory_stats(kCpu).session_peak_bytes, memory_stats(kCpu).current_bytes);
  { const at::Tensor c = at::empty({1 << 18}, at::kFloat); }  // 1 MiB
  reset_peak(kCpu);
  EXPECT_EQ(memory_stats(kCpu).session_peak_bytes - memory_stats(kCpu).current_bytes, 1 << 20);
  // Devices without statistics say so.
  EXPECT_FALSE(memory_stats(c10::Device(c10::kMeta)).tracked);
}

// gpu_memory_limit_mb: a limit on a CPU run, or on a CUDA device that is not there, is a config error naming the key.
TEST(Memory, AGpuLimitNeedsAUsableGpu) {
  const auto message_of = [](c10::Device device) {
    try {
      limit_device_memory(device, 100'000'000);
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::kConfig);
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_NE(message_of(c10::Device(c10::kCPU)).find("gpu_memory_limit_mb is set, but the run is on cpu"), std::string::npos);
  if (!torch::cuda::is_available()) {
    EXPECT_NE(message_of(c10::Device(c10::kCUDA, 0)).find("gpu_memory_limit_mb"), std::string::npos);
  }
}

TEST(Memory, ZeroSizedAndRawAllocations) {
  ASSERT_TRUE(install_cpu_tracking());
  const std::int64_t before = memory_stats(kCpu).current_bytes;
  { const at::Tensor e = at::empty({0}); }
  void* p = c10::GetCPUAllocator()->raw_allocate(1000);
  EXPECT_EQ(memory_stats(kCpu).current_bytes - before, 1000);
  c10::GetCPUAllocator()->raw_deallocate(p);
  EXPECT_EQ(memory_stats(kCpu).current_bytes, before);
}

// What the forward of 8 Linear+GELU blocks keeps for backward, with and without checkpointing every block.
std::int64_t bytes_kept_by_forward(bool checkpointed) {
  torch::manual_seed(0);
  std::vector<torch::nn::Sequential> blocks;
  for (int i = 0; i < 8; ++i) blocks.emplace_back(torch::nn::Linear(256, 256), torch::nn::GELU());
  const at::Tensor x = at::randn({512, 256}).requires_grad_();
  const std::int64_t before = memory_stats(kCpu).current_bytes;
  at::Tensor h = x;
  for (auto& b : blocks) {
    if (checkpointed) {
      h = models::checkpoint([&b](const std::vector<at::Tensor>& in) { return std::vector<at::Tensor>{b->forward(in[0])}; },
                             {h}, b->parameters())[0];
    } else {
      h = b->forward(h);
    }
  }
  const std::int64_t kept = memory_stats(kCpu).current_bytes - before;
  h.sum().backward();
  return kept;
}

TEST(Memory, ActivationCheckpointingKeepsOnlyBlockInputs) {
  ASSERT_TRUE(install_cpu_tracking());
  const std::int64_t plain = bytes_kept_by_forward(false);
  const std::int64_t ck = bytes_kept_by_forward(true);
  const std::int64_t activation = 512 * 256 * 4;  // one [512, 256] float32 tensor
  // Plain: each block keeps the Linear output (GELU's input) and the GELU output: 16 activations.
  EXPECT_GE(plain, 16 * activation);
  // Checkpointed: each block's output only (the next block's saved input): 8 activations.
  EXPECT_LE(ck, 8 * activation + (64 << 10));
  EXPECT_GE(ck, 8 * activation);
}

}  // namespace
}  // namespace bellows::obs

namespace bellows::obs {
namespace {

// profile.memory: the trace's [memory] events include the CPU tensors allocated through the counting allocator
// (it reports to LibTorch's profiler as the default allocator does), with their sizes, allocation and free.
TEST(Memory, ProfiledTracesRecordCpuAllocations) {
  ASSERT_TRUE(install_cpu_tracking());
  const auto path = std::filesystem::path(::testing::TempDir()) / ("memory_trace_" + std::to_string(::getpid()) + ".json");
  constexpr std::int64_t kBytes = 3 << 20;  // a size nothing else in the window allocates
  {
    ProfileOptions o;
    o.enabled = true;
    o.start_step = 0;
    o.steps = 1;
    o.profile_memory = true;
    o.path = path;
    StepProfiler profiler(o);
    profiler.before_step(0);
    { const at::Tensor t = at::ones({kBytes / 4}, at::kFloat); }  // allocated and freed inside the trace
    ASSERT_TRUE(profiler.after_step(1));
  }
  std::ifstream in(path);
  const nlohmann::json trace = nlohmann::json::parse(in);
  int allocated = 0, freed = 0;
  for (const auto& e : trace.at("traceEvents")) {
    if (e.value("name", "") != "[memory]" || !e.contains("args")) continue;
    const auto& a = e["args"];
    if (a.value("Device Type", -1) != 0) continue;  // CPU
    const std::int64_t bytes = a.value("Bytes", std::int64_t{0});
    if (bytes == kBytes) ++allocated;
    if (bytes == -kBytes) ++freed;
  }
  EXPECT_EQ(allocated, 1) << "no [memory] event of the CPU tensor's allocation in " << path;
  EXPECT_EQ(freed, 1) << "no [memory] event of the CPU tensor's release in " << path;
  std::filesystem::remove(path);
}

TEST(ProcessMemory, ResidentMemoryGrowsWithTouchedPagesAndThePeakFollows) {
  const ProcessMemory before = process_memory();
  ASSERT_GT(before.rss_bytes, 0);
  EXPECT_GE(before.peak_rss_bytes, before.rss_bytes);
  std::vector<char> block(64 << 20, 1);  // 64 MiB, every page touched
  const ProcessMemory during = process_memory();
  EXPECT_GE(during.rss_bytes, before.rss_bytes + (48 << 20)) << "64 MiB touched";
  EXPECT_GE(during.peak_rss_bytes, during.rss_bytes);
  EXPECT_EQ(block[12345], 1);
}

}  // namespace
}  // namespace bellows::obs
