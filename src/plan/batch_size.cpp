// The batch-size finder; see batch_size.h.
#include "bellows/plan/batch_size.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "bellows/util/check.h"
#include "bellows/util/exception_report.h"

namespace bellows::plan {

MicroBatchChoice plan_micro_batch(const MicroBatchRequest& r, const hw::HardwareInfo& hw, const Plan& p, const MicroBatchProbe& probe) {
  BELLOWS_CHECK(r.loaded_batch >= 1, fmt::format("a loaded batch of {} samples", r.loaded_batch), "report this bug");
  MicroBatchChoice choice;
  const auto mb = [](std::int64_t b) { return static_cast<double>(b) / 1e6; };
  // --- the budget: what a step may use on top of what the run holds ---
  auto budget = static_cast<std::int64_t>(r.memory_budget_gib * double(1LL << 30));
  std::string budget_what = fmt::format("memory_budget_gib {}", r.memory_budget_gib);
  if (budget == 0) {
    budget = p.device.is_cuda() ? device_free_bytes(hw, p) * 9 / 10 : device_free_bytes(hw, p) * 8 / 10;
    budget_what = p.device.is_cuda() ? "90% of the GPU's free memory" : "80% of the available memory";
  }
  if (r.limit_bytes > 0 && r.limit_bytes < budget) {
    budget = r.limit_bytes;
    budget_what = p.device.is_cuda() ? "gpu_memory_limit_mb" : "cpu_tensor_limit_mb";
  }
  const auto usable = static_cast<std::int64_t>(static_cast<double>(budget) * (1 - kBatchMemoryMargin)) - r.held_bytes - r.later_bytes;

  // --- trials: does a step on b samples fit? ---
  bool counted = true;
  const auto fits = [&](std::int64_t b) {
    try {
      const std::optional<std::int64_t> peak = probe.measure_step(b);
      if (!peak) {
        counted = false;
        return true;
      }
      choice.trials.emplace_back(b, *peak);
      return *peak <= usable;
    } catch (...) {
      if (!report_current_exception().out_of_memory) throw;
      choice.trials.emplace_back(b, -1);
      if (probe.release) probe.release();
      return false;
    }
  };
  std::int64_t good = 0, bad = 0;
  if (!fits(1)) {
    const auto& [samples, peak] = choice.trials.back();
    BELLOWS_FAIL(ErrorKind::kResource,
                 fmt::format("data.batch_size auto: a training step on {} sample {} ({}); the run holds {:.1f} MB and will hold {:.1f} MB more "
                             "(optimizer state, EMA, checkpoint copies)", samples, peak < 0 ? std::string("ran out of memory") : fmt::format("needs {:.1f} MB", mb(peak)),
                             fmt::format("budget {:.1f} MB: {} less a {:.0f}% margin", mb(budget), budget_what, 100 * kBatchMemoryMargin),
                             mb(r.held_bytes), mb(r.later_bytes)),
                 "set memory_budget_gib higher, use bf16-mixed or activation checkpointing (checkpointing: auto), or a smaller model");
  }
  if (!counted) {
    choice.micro_batch = r.loaded_batch;
    choice.entry = {"micro_batch", fmt::format("{} x 1", r.loaded_batch),
                    fmt::format("auto: not measured (tensor memory on {} is not counted): whole batches", p.device.str())};
    return choice;
  }
  good = 1;
  for (std::int64_t b = 2; b < r.loaded_batch && bad == 0; b *= 2) {  // powers of two below the loaded batch
    if (fits(b)) good = b;
    else bad = b;
  }
  if (bad == 0 && good < r.loaded_batch) {  // then the loaded batch itself
    if (fits(r.loaded_batch)) good = r.loaded_batch;
    else bad = r.loaded_batch;
  }
  for (int i = 0; i < 3 && bad > 0 && bad - good > 1; ++i) {  // refined: a few bisections
    const std::int64_t mid = good + (bad - good) / 2;
    if (fits(mid)) good = mid;
    else bad = mid;
  }
  // The fewest near-equal parts of the loaded batch that are each at most `good` samples.
  choice.parts = (r.loaded_batch + good - 1) / good;
  choice.micro_batch = (r.loaded_batch + choice.parts - 1) / choice.parts;
  std::vector<std::string> tried;
  for (const auto& [b, peak] : choice.trials) tried.push_back(peak < 0 ? fmt::format("{}: out of memory", b) : fmt::format("{}: {:.1f} MB", b, mb(peak)));
  choice.entry = {"micro_batch", fmt::format("{} x {}", choice.micro_batch, choice.parts),
                  fmt::format("auto: the largest step that fits {:.1f} MB ({} less a {:.0f}% margin, {:.1f} MB held and {:.1f} MB to come: "
                              "optimizer state, EMA, checkpoint copies) has {} samples; {} = {} micro-batch(es) of at most {} per optimizer step; measured steps [{}]",
                              mb(usable), budget_what, 100 * kBatchMemoryMargin, mb(r.held_bytes), mb(r.later_bytes), good,
                              r.loaded_batch == choice.micro_batch ? fmt::format("the whole batch of {}", r.loaded_batch)
                                                                    : fmt::format("each batch of {}", r.loaded_batch),
                              choice.parts, choice.micro_batch, fmt::join(tried, ", "))};
  return choice;
}

}  // namespace bellows::plan
