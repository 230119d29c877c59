// The eager training step; see eager_step.h.
#include "bellows/train/eager_step.h"

#include <ATen/ATen.h>
#include <ATen/record_function.h>
#include <fmt/format.h>
#include <torch/csrc/autograd/anomaly_mode.h>

#include <numeric>
#include <optional>

#include "bellows/dist/strategy.h"
#include "bellows/precision/precision.h"
#include "bellows/train/anomaly.h"
#include "bellows/train/optimizer.h"
#include "bellows/train/recovering_step.h"  // defines: rethrow_with_batch
#include "bellows/util/check.h"
#include "bellows/util/exception_report.h"

namespace bellows::train {

data::Batch to_device(const data::Batch& batch, const TrainerOptions& options) {
  data::Batch b = batch.to(options.device, options.non_blocking);
  if (options.channels_last) {
    for (auto& [name, t] : b.tensors) {
      if (t.dim() == 4 && t.is_floating_point()) t = t.contiguous(at::MemoryFormat::ChannelsLast);
    }
  }
  return b;
}

StepResult EagerStep::run(StepBatches& batches) {
  StepResult result;
  for (std::int64_t i = 0; i < batches.count(); ++i) {
    const data::Batch batch = batches.next();
    forward_backward(batch, batches.count(), i + 1 == batches.count(), /*local=*/false, batches.number(), result);
  }
  result.gradients = optimizer_phase(batches.number());
  return result;
}

void EagerStep::forward_backward(const data::Batch& loaded, std::int64_t count, bool last_of_step, bool local, std::int64_t number,
                                 StepResult& result) {
  const std::vector<std::int64_t> parts = data::split_sizes(loaded.size, p_.split.parts);
  std::int64_t start = 0;
  for (std::size_t j = 0; j < parts.size(); ++j) {
    const data::Batch part = p_.split.parts > 1 ? loaded.slice(start, parts[j]) : loaded;
    start += parts[j];
    const data::Batch b = to_device(part, p_.options);
    p_.clock.lap(obs::Phase::kCopy);
    StepOutput out;
    {
      RECORD_USER_SCOPE("bellows::forward");
      auto autocast = p_.precision.autocast();
      try {
        out = p_.task.step(p_.model, b);
      } catch (...) {
        rethrow_with_batch(fmt::format("the forward and loss of optimizer step {}", number), b, ErrorKind::kData);
      }
    }
    if (p_.options.detect_anomaly) check_forward(p_.model, b, out.loss, number);
    p_.clock.lap(obs::Phase::kForward);
    {
      RECORD_USER_SCOPE("bellows::backward");
      // Accumulation micro-steps only accumulate; the last one's backward communicates (dist/strategy.h).
      std::optional<dist::Strategy::NoSync> no_sync;
      if (local || !last_of_step || j + 1 < parts.size()) no_sync.emplace(p_.strategy.no_sync());
      std::optional<torch::autograd::DetectAnomalyGuard> anomaly;  // names the backward function that made a NaN
      if (p_.options.detect_anomaly) anomaly.emplace();
      try {
        // A part's loss weighs its share of the loaded batch: the mean over the batch, whatever the split.
        const double parts_per_step = static_cast<double>(count) * static_cast<double>(loaded.size) / static_cast<double>(parts[j]);
        // A whole step in one part divides by 1: no division and no DivBackward (x / 1 is x exactly, so nothing changes).
        p_.strategy.backward(p_.precision.scale_loss(parts_per_step == 1.0 ? out.loss : out.loss / parts_per_step));
      } catch (const c10::Error& e) {
        if (p_.options.detect_anomaly && !report_current_exception().out_of_memory) fail_backward(e, number);
        rethrow_with_batch(fmt::format("the backward of optimizer step {}", number), b, ErrorKind::kInternal);
      } catch (...) {
        rethrow_with_batch(fmt::format("the backward of optimizer step {}", number), b, ErrorKind::kInternal);
      }
    }
    p_.clock.lap(obs::Phase::kBackward);
    out.loss = out.loss.detach();
    result.outputs.push_back(std::move(out));
    result.units.push_back(units_of(b));
    result.samples += b.size;
  }
}

GradientReport EagerStep::optimizer_phase(std::int64_t number) {
  RECORD_USER_SCOPE("bellows::optimizer");
  GradientReport report;
  p_.strategy.finish_gradients();  // the mean over ranks: every rank clips and skips alike from here
  p_.precision.unscale(p_.params);
  report.norm = clip_gradients(report);  // the norms combined over the ranks where they hold shares of the gradients
  if (p_.options.detect_anomaly) check_gradient_norms(p_.model, p_.params, report.param_norms, report.owners, p_.precision, number);
  // x - x is 0 for a finite x and NaN for inf or NaN: the non-finite flag in three ops, 0 or 1.
  const at::Tensor nonfinite = (report.norm - report.norm).ne(0).to(at::kFloat);
  report.skipped = p_.precision.step_on_device(p_.params, nonfinite, [&](const at::Tensor& found_inf) { p_.optimizer.step(found_inf); });
  p_.strategy.finish_update();  // zero1: each rank updated its share; the owners' parameters to every rank
  clear_gradients(p_.params);
  return report;
}

at::Tensor EagerStep::clip_gradients(GradientReport& report) {
  grads_.clear();
  std::vector<std::int64_t> held;
  for (std::size_t i = 0; i < p_.params.size(); ++i) {
    if (!p_.params[i].grad().defined()) continue;
    grads_.push_back(p_.params[i].grad());
    held.push_back(static_cast<std::int64_t>(i));
  }
  const at::TensorOptions f32 = at::TensorOptions().dtype(at::kFloat).device(p_.options.device);
  // Everything stays on the device (no .item()): the norm is the step's non-finite check and a reported
  // metric, read at the logging boundary. The arithmetic is torch.nn.utils.clip_grad_norm_'s.
  at::Tensor norms = grads_.empty() ? at::zeros({0}, f32) : at::stack(at::_foreach_norm(grads_, 2)).to(at::kFloat);
  norms = p_.strategy.combine_gradient_norms(norms, held, static_cast<std::int64_t>(p_.params.size()));
  if (held.empty()) return at::zeros({}, f32);
  for (const std::int64_t i : held) report.owners.push_back(static_cast<std::int32_t>(i));
  report.param_norms = norms;  // kept by the record's window: which gradient was not finite
  const at::Tensor total = at::linalg_vector_norm(report.param_norms, 2);
  if (p_.options.clip_max_norm > 0) {
    // Multiplying by exactly 1 leaves a gradient as it is; a non-finite norm makes a skipped step anyway.
    at::_foreach_mul_(grads_, (p_.options.clip_max_norm / (total + 1e-6)).clamp_max(1.0));
  }
  if (p_.options.clip_value > 0) {
    at::_foreach_clamp_min_(grads_, -p_.options.clip_value);
    at::_foreach_clamp_max_(grads_, p_.options.clip_value);
  }
  return total;
}

}  // namespace bellows::train
