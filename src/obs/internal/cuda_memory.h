// The CUDA side of memory.h: the caching allocator's statistics. Compiled from src/obs/cuda/ when bellows is
// built with CUDA; otherwise CUDA devices report no statistics.
#pragma once

#include "bellows/obs/memory.h"

namespace bellows::obs::internal {

MemoryStats cuda_memory_stats(c10::Device device);
void cuda_reset_peak(c10::Device device);
void cuda_release_cached(c10::Device device);

}  // namespace bellows::obs::internal
