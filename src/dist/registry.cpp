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

RankBytes rank_bytes(const StrategyEntry& entry, MemoryFacts facts) {
  BELLOWS_CHECK(entry.memory != nullptr, fmt::format("strategy {} has no memory model", entry.name), "report this bug");
  BELLOWS_CHECK(facts.world_size >= 1, fmt::format("a job of {} processes", facts.world_size), "report this bug");
  if (facts.checkpoint_layout == "auto") facts.checkpoint_layout = entry.checkpoint_layout;
  return entry.memory(facts);
}

}  // namespace bellows::dist
