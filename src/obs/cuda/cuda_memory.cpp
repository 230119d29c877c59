// CUDA memory statistics from the caching allocator; see internal/cuda_memory.h.
#include <ATen/Context.h>
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAFunctions.h>
#include <c10/cuda/CUDAGuard.h>
#include <cuda_runtime_api.h>

#include <algorithm>

#include "obs/internal/cuda_memory.h"
#include "bellows/util/cuda_units.h"  // defines: register_cuda_unit

namespace bellows::obs::internal {

MemoryStats cuda_memory_stats(c10::Device device) {
  MemoryStats s;
  if (c10::cuda::device_count() == 0) return s;
  const c10::DeviceIndex index = device.has_index() ? device.index() : c10::cuda::current_device();
  const auto stats = c10::cuda::CUDACachingAllocator::getDeviceStats(index);
  const auto& allocated = stats.allocated_bytes[static_cast<std::size_t>(c10::CachingAllocator::StatType::AGGREGATE)];
  s.tracked = true;
  s.current_bytes = allocated.current;
  s.peak_bytes = allocated.peak;
  s.reserved_bytes = stats.reserved_bytes[static_cast<std::size_t>(c10::CachingAllocator::StatType::AGGREGATE)].current;
  return s;
}

void cuda_reset_peak(c10::Device device) {
  if (c10::cuda::device_count() == 0) return;
  c10::cuda::CUDACachingAllocator::resetPeakStats(device.has_index() ? device.index() : c10::cuda::current_device());
}

void cuda_release_cached(c10::Device) {
  if (c10::cuda::device_count() == 0) return;
  c10::cuda::CUDACachingAllocator::emptyCache();
}

std::int64_t cuda_limit_memory(c10::Device device, std::int64_t bytes) {
  if (c10::cuda::device_count() == 0) return 0;
  const c10::DeviceIndex index = device.has_index() ? device.index() : c10::cuda::current_device();
  // The caching allocator exists once CUDA is initialised (lazily, at the first CUDA tensor); a limit set before
  // that failed on the H200 with "Allocator not initialized for device".
  at::globalContext().lazyInitDevice(c10::DeviceType::CUDA);
  c10::cuda::CUDAGuard guard(index);
  std::size_t free = 0, total = 0;
  if (cudaMemGetInfo(&free, &total) != cudaSuccess || total == 0) return 0;
  c10::cuda::CUDACachingAllocator::setMemoryFraction(std::min(1.0, static_cast<double>(bytes) / static_cast<double>(total)), index);
  return static_cast<std::int64_t>(total);
}

}  // namespace bellows::obs::internal

namespace {
const bool kRegisteredCudaMemory = bellows::util::register_cuda_unit("obs/cuda_memory");  // util/cuda_units.h
}  // namespace
