// dist.strategy: single -- one process on one device, nothing to communicate (dist::SingleDevice); `auto`'s choice for
// a process that no launcher started with others.
#include "bellows/dist/registry.h"

namespace bellows::dist {
namespace {

StrategyEntry single_strategy() {
  StrategyEntry e;
  e.name = "single";
  e.help = "one process on one device";
  e.auto_preference = 1;
  e.make = [](const StrategyRequest&) -> std::shared_ptr<Strategy> { return std::make_shared<SingleDevice>(); };
  return e;
}

const StrategyRegistrar kSingleStrategyRegistered(single_strategy());

}  // namespace
}  // namespace bellows::dist
