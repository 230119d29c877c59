// dist.strategy: zero1 -- data parallel with the optimizer state sharded over the ranks (dist/zero.h). Its keys are
// ddp's (dist.backend, dist.bucket_mb, dist.broadcast_buffers, dist.timeout_s), declared by the ddp entry.
#include "bellows/dist/memory.h"
#include "bellows/dist/registry.h"
#include "bellows/dist/zero.h"
#include "dist/strategies/ddp_keys.h"

namespace bellows::dist {
namespace {

// ddp's gradients (every bucket kept, backward's fresh gradients), the optimizer state / w, and beside the weights the
// flat buffer an owner broadcasts its updated weights in (about trainable / w). A whole checkpoint gathers the others'
// optimizer state on rank 0.
RankBytes zero1_memory(const MemoryFacts& f) {
  RankBytes b;
  const std::int64_t w = f.world_size, update = f.trainable_bytes / w, state = optimizer_state_bytes(f);
  b.weights = f.weight_bytes + update;
  b.gradients = 2 * f.trainable_bytes;
  b.optimizer = state / w;
  b.ema = f.ema ? f.weight_bytes : 0;
  b.activations = activation_bytes(f);
  b.checkpoint = checkpoint_bytes(f, state - state / w, b.activations + f.trainable_bytes + update);
  b.unfit = !probe_out_of_memory(f).empty() ? probe_out_of_memory(f) : too_few_tensors(f);
  return b;
}

StrategyEntry zero1_strategy() {
  StrategyEntry e;
  e.name = "zero1";
  e.help = "data parallel with the optimizer state sharded over the processes (ZeRO stage 1): each rank keeps and updates 1/world of it";
  e.several_processes = true;
  e.auto_preference = 0;  // asked for: auto takes zero2 (less memory, no more traffic) where ddp does not fit
  e.memory = zero1_memory;
  e.auto_memory_order = 0;  // the same: zero2 holds less for the same traffic
  e.checkpoint_layout = "sharded";  // rank 0 cannot be asked to hold every rank's share
  e.add_keys = [](config::Schema&) {};
  e.make = [](const StrategyRequest& r) -> std::shared_ptr<Strategy> { return std::make_shared<Zero1>(joined_or_join(r)); };
  return e;
}

const StrategyRegistrar kZero1StrategyRegistered(zero1_strategy());

}  // namespace
}  // namespace bellows::dist
