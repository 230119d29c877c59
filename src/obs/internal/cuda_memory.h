// The CUDA side of memory.h: the caching allocator's statistics. Compiled from src/obs/cuda/ when bellows is
// built with CUDA; otherwise CUDA devices report no statistics.
#pragma once

#include "bellows/obs/memory.h"

namespace bellows::obs::internal {

MemoryStats cuda_memory_stats(c10::Device device);
void cuda_reset_peak(c10::Device device);
void cuda_release_cached(c10::Device device);
// The caching allocator's limit on `device` (setMemoryFraction of its total memory); returns the total, 0 without
// CUDA.
std::int64_t cuda_limit_memory(c10::Device device, std::int64_t bytes);

}  // namespace bellows::obs::internal
