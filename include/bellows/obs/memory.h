// Memory accounting for tensors (seed 003's memory monitoring, seed 004's memory tracker): bytes held by
// tensors now and at the peak since the last reset, per device type.
//  - CPU: LibTorch keeps no CPU statistics, so bellows installs a counting CPU allocator (install_cpu_tracking,
//    once per process, before the tensors to be counted are made). It allocates with c10::alloc_cpu like the
//    default one, with a 64-byte header holding the size; tensors made before it was installed are freed
//    by their own allocator and not counted.
//  - CUDA: the caching allocator's own statistics (allocated bytes, current and peak), per device.
//   obs::install_cpu_tracking();
//   obs::reset_peak(device);
//   ... one training step ...
//   obs::memory_stats(device).peak_bytes;
#pragma once

#include <c10/core/Device.h>

#include <cstdint>

namespace bellows::obs {

struct MemoryStats {
  bool tracked = false;         // false: no statistics for this device (CPU tracking not installed)
  std::int64_t current_bytes = 0;
  std::int64_t peak_bytes = 0;  // since the last reset_peak (or the start)
  // A longer-lived peak that reset_peak does not clear: since the last reset_session_peak. The trainer resets
  // peak_bytes every logging window; a pipeline reads a whole stage's peak from this one.
  std::int64_t session_peak_bytes = 0;
  // CUDA: bytes the caching allocator holds from the driver (allocated plus cached for reuse); -1 on the CPU,
  // where freed blocks go back to the C library (cpu_allocator decides how much of them it keeps).
  std::int64_t reserved_bytes = -1;
};

// Installs the counting CPU allocator (idempotent, thread-safe). Returns false when LibTorch's CPU allocator
// is not the one bellows expects to replace (then nothing is installed).
bool install_cpu_tracking();
bool cpu_tracking_installed();

// A limit on CPU tensor memory (counted by the tracking allocator; 0: none): an allocation that would take the
// counted bytes past it fails with c10::OutOfMemoryError, as a full GPU does. To emulate a smaller machine, and
// to inject out-of-memory failures (cpu_tensor_limit_mb). Process-wide; the scope object restores the previous
// limit. Needs install_cpu_tracking().
class CpuTensorLimit {
 public:
  explicit CpuTensorLimit(std::int64_t bytes);
  ~CpuTensorLimit();
  CpuTensorLimit(const CpuTensorLimit&) = delete;
  CpuTensorLimit& operator=(const CpuTensorLimit&) = delete;

 private:
  std::int64_t previous_;
};
std::int64_t cpu_tensor_limit();  // bytes; 0: none

MemoryStats memory_stats(c10::Device device);
// The peak becomes the current value.
void reset_peak(c10::Device device);
void reset_session_peak(c10::Device device);

// The process's resident memory (RSS) now and its peak since the process started (Linux: VmRSS and VmHWM of
// /proc/self/status), in bytes; -1 where the file cannot be read. Everything the process holds: tensors, the
// allocators' caches, libraries, the program's own data.
struct ProcessMemory {
  std::int64_t rss_bytes = -1;
  std::int64_t peak_rss_bytes = -1;
};
ProcessMemory process_memory();

// Gives memory that freed tensors left cached back to the system: the CUDA caching allocator's unused blocks
// (emptyCache), or on the CPU the C library's free heap pages (malloc_trim). Between the models of a
// pipeline (seed 003: "clearing memory between models").
void release_cached_memory(c10::Device device);

// At most `bytes` in the CUDA caching allocator on `device` (PyTorch's set_per_process_memory_fraction): an
// allocation past it fails as out of memory. Shares a GPU, emulates a smaller one, or tests out-of-memory handling
// on a real device. kConfig error when `device` is not a usable CUDA device or `bytes` exceeds its memory.
void limit_device_memory(c10::Device device, std::int64_t bytes);

}  // namespace bellows::obs
