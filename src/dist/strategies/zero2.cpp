// dist.strategy: zero2 -- data parallel with the optimizer state and the gradients sharded over the ranks
// (dist/zero.h). Its keys are ddp's (dist.backend, dist.bucket_mb, dist.broadcast_buffers, dist.timeout_s), declared
// by the ddp entry.
#include <algorithm>

#include "bellows/dist/memory.h"
#include "bellows/dist/registry.h"
#include "bellows/dist/zero.h"
#include "dist/strategies/ddp_keys.h"

namespace bellows::dist {
namespace {

// zero1 with the gradients reduced to their owners: a rank's share of them and the buckets in flight. Between steps
// it keeps its share; a whole checkpoint gathers the others' optimizer state on rank 0.
RankBytes zero2_memory(const MemoryFacts& f) {
  RankBytes b;
  const std::int64_t w = f.world_size, update = f.trainable_bytes / w, state = optimizer_state_bytes(f);
  b.weights = f.weight_bytes + update;
  b.gradients = sharded_gradient_bytes(f);
  b.optimizer = state / w;
  b.ema = f.ema ? f.weight_bytes : 0;
  b.activations = activation_bytes(f);
  const std::int64_t freed = b.activations + b.gradients - std::min(b.gradients, f.trainable_bytes / w) + update;
  b.checkpoint = checkpoint_bytes(f, state - state / w, freed);
  b.unfit = too_few_tensors(f);
  return b;
}

StrategyEntry zero2_strategy() {
  StrategyEntry e;
  e.name = "zero2";
  e.help = "data parallel with the optimizer state and the gradients sharded over the processes (ZeRO stage 2): each rank "
           "keeps 1/world of both, gradients reduced to their owner";
  e.several_processes = true;
  e.auto_preference = 0;  // auto joins as ddp, then takes zero2 where ddp does not fit
  e.memory = zero2_memory;
  e.auto_memory_order = 2;  // where ddp does not fit: the optimizer state and gradients / w for the same traffic
  e.checkpoint_layout = "sharded";  // rank 0 cannot be asked to hold every rank's share
  e.add_keys = [](config::Schema&) {};
  e.make = [](const StrategyRequest& r) -> std::shared_ptr<Strategy> { return std::make_shared<Zero2>(joined_or_join(r)); };
  return e;
}

const StrategyRegistrar kZero2StrategyRegistered(zero2_strategy());

}  // namespace
}  // namespace bellows::dist
