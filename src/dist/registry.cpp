// The strategy registry; see registry.h. Each strategy registers itself from src/dist/strategies/.
#include "bellows/dist/registry.h"

#include <fmt/format.h>

#include "bellows/util/check.h"
#include "bellows/util/registry.h"

namespace bellows::dist {
namespace {
Registry<StrategyEntry>& strategies() { return registry_of<StrategyEntry>("strategy"); }
}  // namespace

void register_strategy(StrategyEntry entry) { strategies().add(std::move(entry)); }
std::vector<StrategyEntry> strategy_entries() { return strategies().all(); }
std::vector<std::string> strategy_names() { return strategies().names(); }
const StrategyEntry& find_strategy(const std::string& name) { return strategies().find(name); }

const StrategyEntry& auto_strategy(int world_size) {
  const StrategyEntry* best = nullptr;
  for (const StrategyEntry& e : strategy_entries()) {
    if (e.several_processes != (world_size > 1) || e.auto_preference <= 0) continue;
    if (best == nullptr || e.auto_preference > best->auto_preference) best = &find_strategy(e.name);
  }
  BELLOWS_CHECK(best != nullptr, fmt::format("no registered strategy is chosen by dist.strategy: auto for {} process(es)", world_size),
                "register one with auto_preference > 0");
  return *best;
}

}  // namespace bellows::dist
