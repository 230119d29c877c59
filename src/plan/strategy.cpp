// dist.strategy: auto by memory, from the strategies' own memory models; see strategy.h.
#include "bellows/plan/strategy.h"

#include <fmt/format.h>

#include <algorithm>

#include "bellows/dist/registry.h"  // defines: strategy_entries, rank_bytes
#include "bellows/util/check.h"

namespace bellows::plan {
namespace {

// Megabytes, to three significant figures below 100 MB ("0.538", "12.4") and whole above ("1220").
std::string megabytes(std::int64_t bytes) {
  const double mb = static_cast<double>(bytes) / 1e6;
  return mb >= 100 ? fmt::format("{:.0f}", mb) : fmt::format("{:.3g}", mb);
}

}  // namespace

std::vector<RankMemory> rank_memory(const StrategyRequest& r) {
  std::vector<RankMemory> out;
  for (const dist::StrategyEntry& e : dist::strategy_entries()) {  // by name
    if (!e.memory) continue;
    RankMemory option;
    static_cast<dist::RankBytes&>(option) = dist::rank_bytes(e, r.facts);
    option.strategy = e.name;
    option.auto_order = e.auto_memory_order;
    out.push_back(std::move(option));
  }
  // auto's options first, in its order; stable: the others stay by name
  std::stable_sort(out.begin(), out.end(), [](const RankMemory& a, const RankMemory& b) {
    return (a.auto_order > 0 && (b.auto_order <= 0 || a.auto_order < b.auto_order));
  });
  return out;
}

std::string describe_rank_memory(const RankMemory& o) {
  if (!o.unfit.empty()) return fmt::format("{} unfit ({})", o.strategy, o.unfit);
  return fmt::format("{} {} MB (weights {}, gradients {}, optimizer {}, ema {}, activations {}, checkpoint {})", o.strategy,
                     megabytes(o.total()), megabytes(o.weights), megabytes(o.gradients), megabytes(o.optimizer), megabytes(o.ema),
                     megabytes(o.activations), megabytes(o.checkpoint));
}

StrategyChoice plan_strategy(const StrategyRequest& r, const hw::HardwareInfo& hw, const Plan& p) {
  StrategyChoice choice;
  choice.options = rank_memory(r);
  // --- the budget of one rank ---
  std::int64_t budget = static_cast<std::int64_t>(r.memory_budget_gib * double(1LL << 30));
  std::string budget_what = fmt::format("memory_budget_gib {}", r.memory_budget_gib);
  if (budget == 0) {
    budget = device_free_bytes(hw, p);
    budget_what = "the GPU's free memory";
    if (!p.device.is_cuda()) {  // the host's memory, shared by the node's processes
      budget /= std::max(1, r.local_world_size);
      budget_what = r.local_world_size > 1 ? fmt::format("the available memory / {} processes on this node", r.local_world_size)
                                           : "the available memory";
    }
  }
  if (r.limit_bytes > 0 && (budget <= 0 || r.limit_bytes < budget)) {
    budget = r.limit_bytes;
    budget_what = p.device.is_cuda() ? "gpu_memory_limit_mb" : "cpu_tensor_limit_mb";
  }
  choice.budget_bytes = budget;
  const auto usable = static_cast<std::int64_t>(static_cast<double>(budget) * (1 - kStrategyMemoryMargin));
  // --- what the probe step said of the activations, and whether checkpoints count ---
  const dist::MemoryFacts& f = r.facts;
  std::string measured;
  if (f.step_peak_bytes == -2) measured = "activations not counted on this device";
  else if (f.step_peak_bytes == -1)
    measured = fmt::format("a probe step on {} ran out of memory with every gradient whole", r.activation_basis);
  else measured = fmt::format("activations measured on {}", r.activation_basis);
  if (f.checkpoints) {
    measured += f.checkpoint_layout == "auto" ? "; checkpoints in each strategy's layout" : "; checkpoints in the " + f.checkpoint_layout + " layout";
  }
  // --- the choice: auto's options in its order, the first that fits ---
  std::vector<const RankMemory*> tried;
  for (const RankMemory& o : choice.options) {
    if (o.auto_order > 0) tried.push_back(&o);
  }
  BELLOWS_CHECK(!tried.empty(), "no registered strategy has auto_memory_order > 0", "register one that auto tries");
  std::string why;
  for (const RankMemory* o : tried) {
    if (!o->unfit.empty()) continue;
    if (budget <= 0 || o->total() <= usable) {
      choice.name = o->strategy;
      why = budget <= 0 ? "auto: no memory budget known"
                        : fmt::format("auto: {} fits {:.0f}% of {} ({} MB)", o->strategy, 100 * (1 - kStrategyMemoryMargin), budget_what,
                                      megabytes(budget));
      break;
    }
  }
  if (choice.name.empty()) {  // none fits: the one that holds least, said plainly (the first tried where none can run)
    const RankMemory* least = nullptr;
    for (const RankMemory* o : tried) {
      if (o->unfit.empty() && (least == nullptr || o->total() < least->total())) least = o;
    }
    choice.name = (least != nullptr ? least : tried.front())->strategy;
    const bool whole_checkpoints = f.checkpoints && f.checkpoint_layout != "sharded";
    why = fmt::format("auto: no strategy fits {:.0f}% of {} ({} MB); {} {}: expect to run out of memory (try "
                      "checkpointing: auto, bf16-mixed, a smaller micro-batch{} or more ranks)",
                      100 * (1 - kStrategyMemoryMargin), budget_what, megabytes(budget), choice.name,
                      least != nullptr ? "holds least" : "is tried, though none can run it",
                      whole_checkpoints ? ", checkpoint.layout: sharded" : "");
  }
  std::string options;
  for (const RankMemory& o : choice.options) options += "; " + describe_rank_memory(o);
  choice.entry = {"strategy", choice.name, fmt::format("{}; per rank at {} ranks, {}{}", why, f.world_size, measured, options)};
  return choice;
}

}  // namespace bellows::plan
