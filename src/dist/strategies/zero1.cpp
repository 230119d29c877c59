// dist.strategy: zero1 -- data parallel with the optimizer state sharded over the ranks (dist/zero.h). Its keys are
// ddp's (dist.backend, dist.bucket_mb, dist.broadcast_buffers, dist.timeout_s), declared by the ddp entry.
#include "bellows/dist/registry.h"
#include "bellows/dist/zero.h"
#include "dist/strategies/ddp_keys.h"

namespace bellows::dist {
namespace {

StrategyEntry zero1_strategy() {
  StrategyEntry e;
  e.name = "zero1";
  e.help = "data parallel with the optimizer state sharded over the processes (ZeRO stage 1): each rank keeps and updates 1/world of it";
  e.several_processes = true;
  e.auto_preference = 0;  // asked for: auto takes zero2 (less memory, no more traffic) where ddp does not fit
  e.checkpoint_layout = "sharded";  // rank 0 cannot be asked to hold every rank's share
  e.add_keys = [](config::Schema&) {};
  e.make = [](const StrategyRequest& r) -> std::shared_ptr<Strategy> { return std::make_shared<Zero1>(joined_or_join(r)); };
  return e;
}

const StrategyRegistrar kZero1StrategyRegistered(zero1_strategy());

}  // namespace
}  // namespace bellows::dist
