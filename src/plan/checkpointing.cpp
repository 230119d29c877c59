// The activation-checkpointing decision; see checkpointing.h.
#include "bellows/plan/checkpointing.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

namespace bellows::plan {

PlanEntry plan_checkpointing(const CheckpointingRequest& r, const hw::HardwareInfo& hw, const Plan& p, const CheckpointingProbe& probe) {
  const bool is_auto = r.patterns.size() == 1 && r.patterns[0] == "auto";
  if (!is_auto) {
    if (r.patterns.empty()) return {"checkpointing", "off", "default"};
    const auto chosen = probe.apply(r.patterns);
    if (chosen.empty()) return {"checkpointing", "off", "default"};
    return {"checkpointing", fmt::format("{} blocks", chosen.size()), fmt::format("requested: {}", fmt::join(chosen, ", "))};
  }
  if (probe.blocks.empty()) return {"checkpointing", "off", "auto: the model has no checkpointable blocks"};
  auto budget = static_cast<std::int64_t>(r.memory_budget_gib * double(1LL << 30));
  std::string budget_what = "the memory budget";
  if (budget == 0) {
    budget = device_free_bytes(hw, p);
    budget_what = p.device.is_cuda() ? "free GPU memory" : "available memory";
  }
  const auto plain = probe.measure_step();
  if (!plain) return {"checkpointing", "off", "auto: memory on this device is not counted"};
  const auto gib = [](std::int64_t b) { return static_cast<double>(b) / double(1LL << 30); };
  if (budget <= 0 || *plain <= budget * 8 / 10) {
    return {"checkpointing", "off",
            fmt::format("auto: a step peaks at {:.2f} GiB, within 80% of {} ({:.2f} GiB)", gib(*plain), budget_what, gib(budget))};
  }
  probe.checkpoint_all();
  const auto checkpointed = probe.measure_step();
  return {"checkpointing", fmt::format("{} blocks", probe.blocks.size()),
          fmt::format("auto: a step peaks at {:.2f} GiB, over 80% of {} ({:.2f} GiB); checkpointed: {:.2f} GiB", gib(*plain),
                      budget_what, gib(budget), gib(checkpointed.value_or(0)))};
}

}  // namespace bellows::plan
