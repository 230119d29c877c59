// Without CUDA: CUDA devices have no memory statistics; see internal/cuda_memory.h.
#include "obs/internal/cuda_memory.h"

namespace bellows::obs::internal {

MemoryStats cuda_memory_stats(c10::Device) { return {}; }
void cuda_reset_peak(c10::Device) {}
void cuda_release_cached(c10::Device) {}
std::int64_t cuda_limit_memory(c10::Device, std::int64_t) { return 0; }

}  // namespace bellows::obs::internal
