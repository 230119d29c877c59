// dist.strategy: fsdp -- parameters, gradients and optimizer state sharded over the ranks (dist/fsdp.h). Its own key
// is dist.fsdp_units; the others are ddp's (dist.backend, dist.bucket_mb, dist.broadcast_buffers, dist.timeout_s),
// declared by the ddp entry.
#include <fmt/format.h>

#include <algorithm>
#include <set>
#include <unordered_set>

#include "bellows/config/binding.h"  // defines: Binding
#include "bellows/dist/fsdp.h"
#include "bellows/dist/memory.h"
#include "bellows/dist/registry.h"
#include "bellows/util/name_patterns.h"  // defines: select_names
#include "dist/strategies/ddp_keys.h"

namespace bellows::dist {
namespace {

// fsdp's own key, bound once (config/binding.h): the units given to Fsdp and counted by its memory rule.
struct FsdpKeys {
  std::vector<std::string> units;  // dist.fsdp_units: block name patterns (empty: every block)
};

const config::Binding<FsdpKeys>& fsdp_binding() {
  return config::bound<FsdpKeys>("dist.", [](config::Binding<FsdpKeys>& b) {
    b.key("fsdp_units", &FsdpKeys::units,
          "fsdp: the model's blocks gathered one at a time, as glob patterns over the block names that checkpointing takes "
          "(\"encoder.layers.*\"); empty: every block; weights outside them stay on every rank");
  });
}

// Its units among the model's blocks (dist.fsdp_units; every block where it is empty): their trainable bytes, the
// largest unit's, and why fsdp cannot train this model ("" where it can).
struct UnitBytes {
  std::int64_t bytes = 0, largest = 0;
  std::string unfit;
};

UnitBytes unit_bytes(const MemoryFacts& f) {
  UnitBytes u;
  if (f.blocks.empty()) return {0, 0, "the model has no named blocks to gather one at a time"};
  if (f.ema_eval) return {0, 0, "ema.eval: no rank would hold the whole average"};
  std::vector<std::string> names;
  for (const BlockBytes& b : f.blocks) names.push_back(b.name);
  const std::vector<std::string> patterns = f.config ? fsdp_binding().read(*f.config).units : FsdpKeys{}.units;
  const std::vector<std::string> chosen = patterns.empty() ? names : select_names(patterns, names, "dist.fsdp_units");
  const std::set<std::string> units(chosen.begin(), chosen.end());
  std::unordered_set<const void*> in_units;
  for (const BlockBytes& b : f.blocks) {
    if (!units.contains(b.name)) continue;
    std::int64_t bytes = 0;
    for (const TensorBytes& t : b.trainable) {
      if (!in_units.insert(t.id).second) {
        u.unfit = fmt::format("a weight of block {} is in another unit too (tied)", b.name);
        continue;
      }
      bytes += t.bytes;
    }
    u.bytes += bytes;
    u.largest = std::max(u.largest, bytes);
  }
  return u;
}

// What lies outside the units whole, the units' trainable weights / w between steps, plus while a unit runs three
// units' worth (its weights, the buffer they were gathered in, the next unit's prefetched buffer) and after the update
// the broadcast of the rest; the gradients as zero2's; the EMA of what the rank holds between steps. A whole checkpoint
// gathers every weight on every rank, and the others' optimizer state and EMA on rank 0.
RankBytes fsdp_memory(const MemoryFacts& f) {
  RankBytes b;
  const UnitBytes u = unit_bytes(f);
  const std::int64_t w = f.world_size, state = optimizer_state_bytes(f);
  const std::int64_t held = f.weight_bytes - u.bytes + u.bytes / w, others = u.bytes - u.bytes / w;
  const std::int64_t running = 3 * u.largest + (f.trainable_bytes - u.bytes) / w;
  b.weights = held + running;
  b.gradients = sharded_gradient_bytes(f);
  b.optimizer = state / w;
  b.ema = f.ema ? held : 0;
  b.activations = activation_bytes(f);
  const std::int64_t freed = b.activations + b.gradients - std::min(b.gradients, f.trainable_bytes / w) + running;
  b.checkpoint = checkpoint_bytes(f, others + state - state / w + (f.ema ? others : 0), freed);
  b.unfit = !u.unfit.empty() ? u.unfit : too_few_tensors(f);
  return b;
}

StrategyEntry fsdp_strategy() {
  StrategyEntry e;
  e.name = "fsdp";
  e.help = "parameters, gradients and optimizer state sharded over the processes (ZeRO stage 3, FSDP): each rank keeps about "
           "1/world of the blocks' weights and gathers a block's whole weights while it runs";
  e.several_processes = true;
  e.auto_preference = 0;  // auto joins as ddp, then takes fsdp where zero2 does not fit either
  e.memory = fsdp_memory;
  e.auto_memory_order = 3;  // the least memory, and the most traffic: every unit gathered in forward and backward
  e.checkpoint_layout = "sharded";  // rank 0 cannot be asked to hold every rank's share
  e.add_keys = [](config::Schema& s) { fsdp_binding().declare(s); };
  e.make = [](const StrategyRequest& r) -> std::shared_ptr<Strategy> {
    return std::make_shared<Fsdp>(joined_or_join(r), fsdp_binding().read(r.config).units);
  };
  return e;
}

const StrategyRegistrar kFsdpStrategyRegistered(fsdp_strategy());

}  // namespace
}  // namespace bellows::dist
