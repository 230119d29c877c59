// Memory accounting; see memory.h. The counting CPU allocator is written here because LibTorch's CPU
// allocator keeps no statistics (its profiler hook reports only to a thread-local profiler state); it reports to
// that hook as LibTorch's allocator does, so memory profiling still sees CPU allocations.
#include "bellows/obs/memory.h"

#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>

#include <c10/core/Allocator.h>
#include <fmt/format.h>
#include <c10/core/CPUAllocator.h>
#include <c10/core/impl/alloc_cpu.h>
#include <c10/util/Exception.h>

#include <malloc.h>

#include <algorithm>
#include <atomic>
#include <map>
#include <cstring>
#include <mutex>

#include "obs/internal/cuda_memory.h"
#include "bellows/util/check.h"
#include "bellows/util/sanitizers.h"  // defines: kSanitizedBuild

namespace bellows::obs {
namespace {

std::atomic<std::int64_t> g_current{0};
std::atomic<std::int64_t> g_limit{0};  // CpuTensorLimit; 0: none
std::atomic<std::int64_t> g_peak{0};
std::atomic<std::int64_t> g_session_peak{0};
// CUDA's allocator has one peak, which reset_peak clears: the session peak keeps the highest one seen.
std::mutex g_cuda_mutex;
std::map<int, std::int64_t> g_cuda_session_peak;

void raise_to(std::atomic<std::int64_t>& peak, std::int64_t now) {
  std::int64_t seen = peak.load(std::memory_order_relaxed);
  while (now > seen && !peak.compare_exchange_weak(seen, now, std::memory_order_relaxed)) {
  }
}

// 64 bytes keep the data at c10's CPU alignment (64); the first 8 hold the size.
constexpr std::size_t kHeader = 64;

void count(std::int64_t delta) {
  const std::int64_t now = g_current.fetch_add(delta, std::memory_order_relaxed) + delta;
  if (delta > 0) {
    raise_to(g_peak, now);
    raise_to(g_session_peak, now);
  }
}

void counted_free(void* data) {
  if (data == nullptr) return;
  c10::profiledCPUMemoryReporter().Delete(data);  // as LibTorch's own CPU allocator: the profiler's memory events
  char* base = static_cast<char*>(data) - kHeader;
  std::int64_t size = 0;
  std::memcpy(&size, base, sizeof size);
  count(-size);
  c10::free_cpu(base);
}

class CountingCpuAllocator final : public c10::Allocator {
 public:
  c10::DataPtr allocate(std::size_t n) override {
    if (n == 0) return {nullptr, nullptr, &counted_free, c10::Device(c10::kCPU)};
    if (const std::int64_t limit = g_limit.load(std::memory_order_relaxed); limit > 0) {
      const std::int64_t in_use = g_current.load(std::memory_order_relaxed);
      TORCH_CHECK_WITH(OutOfMemoryError, in_use + static_cast<std::int64_t>(n) <= limit, "CPU tensor memory limit of ", static_cast<double>(limit) / 1e6,
                       " MB reached (cpu_tensor_limit_mb): tried to allocate ", n, " bytes with ", in_use, " bytes of tensors in use");
    }
    char* base = static_cast<char*>(c10::alloc_cpu(n + kHeader));  // throws c10::Error when out of memory
    const auto size = static_cast<std::int64_t>(n);
    std::memcpy(base, &size, sizeof size);
    count(size);
    void* data = base + kHeader;
    // As LibTorch's own CPU allocator does: profile.memory traces (the profiler's [memory] events) see the CPU
    // allocations only through this reporter.
    c10::profiledCPUMemoryReporter().New(data, n);
    return {data, data, &counted_free, c10::Device(c10::kCPU)};
  }
  c10::DeleterFnPtr raw_deleter() const override { return &counted_free; }
  void copy_data(void* dest, const void* src, std::size_t count) const override { default_copy_data(dest, src, count); }
};

CountingCpuAllocator g_allocator;
std::atomic<bool> g_installed{false};

}  // namespace

bool install_cpu_tracking() {
  static std::once_flag once;
  std::call_once(once, [] {
    c10::SetCPUAllocator(&g_allocator, /*priority=*/1);  // above LibTorch's default (0)
    g_installed = c10::GetCPUAllocator() == &g_allocator;
  });
  return g_installed;
}

bool cpu_tracking_installed() { return g_installed; }

CpuTensorLimit::CpuTensorLimit(std::int64_t bytes) : previous_(g_limit.exchange(std::max<std::int64_t>(bytes, 0))) {}
CpuTensorLimit::~CpuTensorLimit() { g_limit.store(previous_); }
std::int64_t cpu_tensor_limit() { return g_limit.load(); }

MemoryStats memory_stats(c10::Device device) {
  MemoryStats s;
  if (device.is_cpu()) {
    if (!g_installed) return s;
    s.tracked = true;
    s.current_bytes = g_current.load();
    s.peak_bytes = g_peak.load();
    s.session_peak_bytes = g_session_peak.load();
    return s;
  }
  if (device.is_cuda()) {
    s = internal::cuda_memory_stats(device);
    std::lock_guard<std::mutex> lock(g_cuda_mutex);
    std::int64_t& session = g_cuda_session_peak[device.has_index() ? device.index() : 0];
    session = std::max(session, s.peak_bytes);
    s.session_peak_bytes = session;
  }
  return s;
}

void reset_peak(c10::Device device) {
  if (device.is_cpu()) {
    g_peak.store(g_current.load());
  } else if (device.is_cuda()) {
    memory_stats(device);  // carries the peak into the session peak
    internal::cuda_reset_peak(device);
  }
}

void reset_session_peak(c10::Device device) {
  if (device.is_cpu()) {
    g_session_peak.store(g_current.load());
  } else if (device.is_cuda()) {
    const MemoryStats now = internal::cuda_memory_stats(device);
    std::lock_guard<std::mutex> lock(g_cuda_mutex);
    g_cuda_session_peak[device.has_index() ? device.index() : 0] = now.current_bytes;
  }
}

void release_cached_memory(c10::Device device) {
  if (device.is_cuda()) {
    internal::cuda_release_cached(device);
  } else if (!util::kSanitizedBuild) {
    // glibc's own arenas; under a sanitizer runtime malloc is not glibc's and trimming its unused arenas crashed
    // (ASan, several threads).
    malloc_trim(0);
  }
}

void limit_device_memory(c10::Device device, std::int64_t bytes) {
  BELLOWS_CHECK_CONFIG(device.is_cuda(), fmt::format("gpu_memory_limit_mb is set, but the run is on {}", device.str()),
                       "set gpu_memory_limit_mb: 0 on the CPU (cpu_tensor_limit_mb limits CPU tensors)");
  const std::int64_t total = internal::cuda_limit_memory(device, bytes);
  BELLOWS_CHECK_CONFIG(total > 0, fmt::format("gpu_memory_limit_mb: the memory of {} cannot be read", device.str()),
                       "check the device, or set gpu_memory_limit_mb: 0");
  BELLOWS_CHECK_CONFIG(bytes <= total, fmt::format("gpu_memory_limit_mb is {:.0f}, but {} has {:.0f} MB", bytes / 1e6, device.str(), total / 1e6),
                       "set a limit below the GPU's memory (0: none)");
}

ProcessMemory process_memory() {
  ProcessMemory m;
  std::ifstream status("/proc/self/status");
  for (std::string line; std::getline(status, line);) {
    // "VmRSS:     123456 kB"
    auto field = [&](const char* key) -> std::int64_t {
      if (line.rfind(key, 0) != 0) return -1;
      return std::strtoll(line.c_str() + std::strlen(key), nullptr, 10) * 1024;
    };
    if (const std::int64_t v = field("VmRSS:"); v >= 0) m.rss_bytes = v;
    if (const std::int64_t v = field("VmHWM:"); v >= 0) m.peak_rss_bytes = v;
  }
  return m;
}

}  // namespace bellows::obs
