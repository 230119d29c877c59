// The strategy registry: how replicas meet (dist/strategy.h) is chosen by name (`dist.strategy`), and each strategy
// registers a StrategyEntry from its own file (src/dist/strategies/), like a model or a data source: its keys, whether
// it joins a job of several processes, its preference under `auto`, its bytes per rank by category (dist/memory.h)
// and auto's order among them, and how to build it. app/ builds the run's strategy from the entry and plan/ sizes the
// options from the entries; neither names one.
#pragma once

#include <c10/core/Device.h>

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "bellows/config/config.h"     // defines: Config
#include "bellows/config/schema.h"     // defines: Schema
#include "bellows/dist/ddp.h"          // defines: Ddp
#include "bellows/dist/environment.h"  // defines: ProcessInfo
#include "bellows/dist/memory.h"       // defines: MemoryFacts, RankBytes
#include "bellows/dist/strategy.h"     // defines: Strategy

namespace bellows::dist {

// What a strategy is built from.
struct StrategyRequest {
  const config::Config& config;  // the run's validated config (the entry's own keys)
  ProcessInfo process;           // this process in its job (the launcher's environment)
  c10::Device device;            // where the model trains
  std::string config_hash;       // the resolved config's hash: ranks whose configs differ stop at the rendezvous
  // Where the job's processes met already (dist.strategy: auto decides once the model is built): the strategies of
  // several processes take this one's process group instead of a rendezvous of their own.
  std::shared_ptr<Ddp> joined;
};

struct StrategyEntry {
  std::string name;  // dist.strategy: ddp
  std::string help;
  // It joins a job of several processes started by a launcher (bellows launch, torchrun, srun, mpirun); false: the
  // process trains alone, which an environment naming several processes contradicts.
  bool several_processes = false;
  // dist.strategy: auto joins as, among the entries for the job's process count (one, or several), the highest (0:
  // never); for several, the run then decides by memory once the model is built (auto_memory_order).
  int auto_preference = 0;
  // Its bytes per rank by category, at the peak of a step or of a checkpoint (dist/memory.h); empty: none is known.
  std::function<RankBytes(const MemoryFacts&)> memory;
  // dist.strategy: auto on several processes tries the entries with a memory model in this order (1 first) and takes
  // the first that fits a rank's budget (plan/strategy.h); 0: never (asked for by name only).
  int auto_memory_order = 0;
  // checkpoint.layout: auto writes its checkpoints as "whole" (one set of files, written by rank 0) or "sharded"
  // (every rank writes what it holds; ckpt/sharded.h): sharded where the strategy shards the training state.
  std::string checkpoint_layout = "whole";
  std::function<void(config::Schema&)> add_keys;  // its own keys (may be none)
  std::function<std::shared_ptr<Strategy>(const StrategyRequest&)> make;
};

std::vector<StrategyEntry> strategy_entries();  // sorted by name
std::vector<std::string> strategy_names();
const StrategyEntry& find_strategy(const std::string& name);  // kConfig error naming the closest registered name
// What dist.strategy: auto is for a job of `world_size` processes.
const StrategyEntry& auto_strategy(int world_size);
// The entry's bytes per rank for `facts`, its checkpoint layout where facts say auto (StrategyEntry::checkpoint_layout).
// kInternal error for an entry without a memory model.
RankBytes rank_bytes(const StrategyEntry& entry, MemoryFacts facts);

// Registration, one static object per strategy (in its own file):
//   const bellows::dist::StrategyRegistrar kMineStrategyRegistered(mine_strategy());
void register_strategy(StrategyEntry entry);  // kInternal error on a duplicate name
struct StrategyRegistrar {
  explicit StrategyRegistrar(StrategyEntry entry) { register_strategy(std::move(entry)); }
};

}  // namespace bellows::dist
