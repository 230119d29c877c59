// The eager training step (train/step_runner.h): each loaded batch as MicroSplit::parts micro-batches, each one's
// forward under the precision policy's autocast and its backward through the strategy (inside no_sync() for all but
// the step's last, so accumulation only accumulates), then the optimizer phase: the gradients of every rank combined,
// unscaled, clipped, and the fused optimizer's update, skipped on the device when they are not finite. The other
// runners are built from its two halves.
#pragma once

#include "bellows/train/step_runner.h"

namespace bellows::train {

class EagerStep final : public StepRunner {
 public:
  explicit EagerStep(const StepParts& parts) : p_(parts) {}
  StepResult run(StepBatches& batches) override;

  // One loaded batch of a step of `count` loaded batches. Each micro-batch loss is a batch mean: dividing by the
  // micro-batch count (each part weighted by its share of its batch) makes k batches of b samples give the gradient
  // of one batch of k*b samples. The step's last part communicates its gradients (dist/strategy.h) unless `local`
  // (out-of-memory recovery with several ranks: they agree first). Adds each part's output, units and samples to
  // `result`; `number` is the optimizer step's, for detect_anomaly's messages.
  void forward_backward(const data::Batch& loaded, std::int64_t count, bool last_of_step, bool local, std::int64_t number,
                        StepResult& result);
  // After the step's backward passes: the mean over ranks, unscale, detect_anomaly's gradient check, the norm and
  // clipping, the optimizer step (skipped on the device on non-finite gradients), zero_grad. Nothing waits for the
  // device.
  GradientReport optimizer_phase(std::int64_t number);

 private:
  at::Tensor clip_gradients(GradientReport& report);  // the pre-clip norm, on the device

  StepParts p_;
  std::vector<at::Tensor> grads_;  // clip_gradients' list, reused step after step
};

// The batch on the trainer's device (pinned copies without blocking), 4-D floating tensors in channels_last where
// the options ask for it.
data::Batch to_device(const data::Batch& batch, const TrainerOptions& options);

}  // namespace bellows::train
