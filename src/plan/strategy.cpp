// dist.strategy: auto by memory; see strategy.h.
#include "bellows/plan/strategy.h"

#include <fmt/format.h>

#include <algorithm>

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
  BELLOWS_CHECK(r.world_size >= 1, fmt::format("a job of {} processes", r.world_size), "report this bug");
  const std::int64_t w = r.world_size;
  const std::int64_t activations = r.step_peak_bytes >= 0 ? std::max<std::int64_t>(0, r.step_peak_bytes - r.trainable_bytes) : 0;
  const std::int64_t state = r.optimizer_states * r.trainable_bytes;
  const std::int64_t sharded_gradients = std::min(r.trainable_bytes, r.trainable_bytes / w + 2 * r.bucket_bytes);
  const std::string too_few = r.trainable_tensors < w
                                  ? fmt::format("{} trainable tensors for {} ranks: a rank would own none", r.trainable_tensors, w)
                                  : std::string();
  // zero1 and zero2 broadcast each owner's updated weights in one flat buffer: the largest, about 1/w of them.
  const std::int64_t update_buffer = r.trainable_bytes / w;
  // ddp and zero1 keep every bucket between steps, and backward allocates each gradient afresh before it is copied into
  // its bucket: twice the trainable bytes at the end of backward.
  const std::int64_t bucketed = 2 * r.trainable_bytes;
  std::vector<RankMemory> out;
  out.push_back({"ddp", r.weight_bytes, bucketed, state, r.ema ? r.weight_bytes : 0, activations, ""});
  out.push_back({"zero1", r.weight_bytes + update_buffer, bucketed, state / w, r.ema ? r.weight_bytes : 0, activations, too_few});
  out.push_back({"zero2", r.weight_bytes + update_buffer, sharded_gradients, state / w, r.ema ? r.weight_bytes : 0, activations, too_few});
  const std::int64_t held = r.weight_bytes - r.unit_bytes + r.unit_bytes / w;  // between steps
  // While a unit runs: its weights, the flat buffer they were gathered in, and the next unit's buffer (prefetched);
  // after the update, the broadcast of the weights outside the units.
  const std::int64_t gathered = 3 * r.largest_unit_bytes + (r.trainable_bytes - r.unit_bytes) / w;
  out.push_back({"fsdp", held + gathered, sharded_gradients, state / w, r.ema ? held : 0, activations,
                 !r.fsdp_unfit.empty() ? r.fsdp_unfit : too_few});
  return out;
}

std::string describe_rank_memory(const RankMemory& o) {
  if (!o.unfit.empty()) return fmt::format("{} unfit ({})", o.strategy, o.unfit);
  return fmt::format("{} {} MB (weights {}, gradients {}, optimizer {}, ema {}, activations {})", o.strategy,
                     megabytes(o.total()), megabytes(o.weights), megabytes(o.gradients), megabytes(o.optimizer), megabytes(o.ema),
                     megabytes(o.activations));
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
  const auto option = [&](const std::string& name) -> const RankMemory& {
    return *std::find_if(choice.options.begin(), choice.options.end(), [&](const RankMemory& o) { return o.strategy == name; });
  };
  // --- what the probe step said of the activations ---
  std::string measured;
  if (r.step_peak_bytes == -2) measured = "activations not counted on this device";
  else if (r.step_peak_bytes == -1) measured = fmt::format("a probe step on {} ran out of memory under ddp", r.activation_basis);
  else measured = fmt::format("activations measured on {}", r.activation_basis);
  // --- the choice: the first of ddp, zero2, fsdp that fits ---
  std::string why;
  for (const std::string name : {"ddp", "zero2", "fsdp"}) {
    const RankMemory& o = option(name);
    if (!o.unfit.empty()) continue;
    if (r.step_peak_bytes == -1 && name != "fsdp" && name != "zero2") continue;  // ddp's own step did not fit
    if (budget <= 0 || o.total() <= usable) {
      choice.name = name;
      why = budget <= 0 ? "auto: no memory budget known" : fmt::format("auto: {} fits {:.0f}% of {} ({} MB)", name, 100 * (1 - kStrategyMemoryMargin),
                                                                      budget_what, megabytes(budget));
      break;
    }
  }
  if (choice.name.empty()) {  // none fits: the one that holds least, said plainly
    const RankMemory* least = nullptr;
    for (const std::string name : {"ddp", "zero2", "fsdp"}) {
      const RankMemory& o = option(name);
      if (o.unfit.empty() && (least == nullptr || o.total() < least->total())) least = &o;
    }
    BELLOWS_CHECK(least != nullptr, "ddp is always an option", "report this bug");
    choice.name = least->strategy;
    why = fmt::format("auto: no strategy fits {:.0f}% of {} ({} MB); {} holds least: expect to run out of memory (try "
                      "checkpointing: auto, bf16-mixed, a smaller micro-batch or more ranks)",
                      100 * (1 - kStrategyMemoryMargin), budget_what, megabytes(budget), choice.name);
  }
  std::string options;
  for (const RankMemory& o : choice.options) options += "; " + describe_rank_memory(o);
  choice.entry = {"strategy", choice.name, fmt::format("{}; per rank at {} ranks, {}{}", why, r.world_size, measured, options)};
  return choice;
}

}  // namespace bellows::plan
