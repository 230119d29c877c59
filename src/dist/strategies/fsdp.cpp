// dist.strategy: fsdp -- parameters, gradients and optimizer state sharded over the ranks (dist/fsdp.h). Its own key
// is dist.fsdp_units; the others are ddp's (dist.backend, dist.bucket_mb, dist.broadcast_buffers, dist.timeout_s),
// declared by the ddp entry.
#include <yaml-cpp/yaml.h>

#include "bellows/config/schema.h"
#include "bellows/dist/fsdp.h"
#include "bellows/dist/registry.h"
#include "dist/strategies/ddp_keys.h"

namespace bellows::dist {
namespace {

StrategyEntry fsdp_strategy() {
  StrategyEntry e;
  e.name = "fsdp";
  e.help = "parameters, gradients and optimizer state sharded over the processes (ZeRO stage 3, FSDP): each rank keeps about "
           "1/world of the blocks' weights and gathers a block's whole weights while it runs";
  e.several_processes = true;
  e.auto_preference = 0;  // auto joins as ddp, then takes fsdp where zero2 does not fit either (plan/strategy.h)
  e.checkpoint_layout = "sharded";  // rank 0 cannot be asked to hold every rank's share
  e.add_keys = [](config::Schema& s) {
    s.add("dist.fsdp_units", config::Type::kStringList,
          "fsdp: the model's blocks gathered one at a time, as glob patterns over the block names that checkpointing takes "
          "(\"encoder.layers.*\"); empty: every block; weights outside them stay on every rank")
        .default_value(YAML::Node(YAML::NodeType::Sequence));
  };
  e.make = [](const StrategyRequest& r) -> std::shared_ptr<Strategy> {
    return std::make_shared<Fsdp>(joined_or_join(r), config::get_string_list(r.config, "dist.fsdp_units"));
  };
  return e;
}

const StrategyRegistrar kFsdpStrategyRegistered(fsdp_strategy());

}  // namespace
}  // namespace bellows::dist
