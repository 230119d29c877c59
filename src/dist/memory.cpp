// The rules the strategies' memory models share; see memory.h.
#include "bellows/dist/memory.h"

#include <fmt/format.h>

#include <algorithm>

namespace bellows::dist {

std::int64_t activation_bytes(const MemoryFacts& f) {
  return f.step_peak_bytes >= 0 ? std::max<std::int64_t>(0, f.step_peak_bytes - f.trainable_bytes) : 0;
}

std::int64_t optimizer_state_bytes(const MemoryFacts& f) {
  return f.optimizer_states * f.trainable_bytes;
}

std::int64_t sharded_gradient_bytes(const MemoryFacts& f) {
  return std::min(f.trainable_bytes, f.trainable_bytes / f.world_size + 2 * f.bucket_bytes);
}

std::string too_few_tensors(const MemoryFacts& f) {
  if (f.trainable_tensors >= f.world_size) return "";
  return fmt::format("{} trainable tensors for {} ranks: a rank would own none", f.trainable_tensors, f.world_size);
}

std::string probe_out_of_memory(const MemoryFacts& f) {
  return f.step_peak_bytes == -1 ? "its step, measured with every gradient whole, ran out of memory" : "";
}

std::int64_t checkpoint_bytes(const MemoryFacts& f, std::int64_t gathered, std::int64_t freed_after_step) {
  if (!f.checkpoints) return 0;
  const bool several = f.world_size > 1;
  const bool whole = f.checkpoint_layout != "sharded";
  const std::int64_t host = f.weight_bytes + optimizer_state_bytes(f) + (f.ema ? f.weight_bytes : 0);
  std::int64_t held = 0;
  if (several && whole) held = gathered + (f.host_memory ? host : 0);
  if (!several && f.host_memory) held = host;  // one process: its background write's copy, whichever the layout
  return std::max<std::int64_t>(0, held - freed_after_step);
}

}  // namespace bellows::dist
