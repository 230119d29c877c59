// Dynamic loss scaling for fp16 training, with PyTorch's documented GradScaler semantics, on ATen's kernels
// (_amp_foreach_non_finite_check_and_unscale_, _amp_update_scale_; CPU and CUDA): scale 2^16 at start, x2
// after `growth_interval` clean steps, x0.5 and a skipped step when any gradient is inf/NaN; gradients are
// unscaled exactly once per step, before clipping. Beyond PyTorch (#55585, #67590): step() says whether it
// skipped, and the skip count and current scale are readable metrics.
#pragma once

#include <ATen/core/Tensor.h>

#include <functional>
#include <vector>

#include "bellows/util/state_dict.h"  // defines: StateDict

namespace bellows::precision {

struct GradScalerOptions {
  double init_scale = 65536.0;
  double growth_factor = 2.0;
  double backoff_factor = 0.5;
  std::int64_t growth_interval = 2000;
  bool enabled = true;  // disabled: scale() and unscale_() are identities; non-finite grads still skip
};

class GradScaler {
 public:
  explicit GradScaler(GradScalerOptions options = {});

  // loss * scale (the scale tensor is created on the loss's device on first use).
  at::Tensor scale(const at::Tensor& loss);

  // Divides the gradients of `params` by the scale in place and records whether any is inf/NaN.
  // Idempotent within a step: a second call before step()/update() does nothing.
  void unscale_(const std::vector<at::Tensor>& params);

  // Unscales if not yet done, then runs `optimizer_step` unless a non-finite gradient was found.
  // Returns true when the optimizer stepped, false when the step was skipped.
  bool step(const std::vector<at::Tensor>& params, const std::function<void()>& optimizer_step);

  // Adjusts the scale for the next step (growth/backoff) and resets the per-step state.
  void update();

  double get_scale() const;
  std::int64_t skipped_steps() const { return skipped_steps_; }
  bool last_step_skipped() const { return last_skipped_; }
  const GradScalerOptions& options() const { return options_; }

  StateDict state_dict() const;
  void load_state_dict(const StateDict& state);

 private:
  GradScalerOptions options_;
  at::Tensor scale_;           // float32, 1 element, on the gradients' device
  at::Tensor growth_tracker_;  // int32, 1 element
  at::Tensor found_inf_;       // float32, 1 element; valid between unscale_ and update
  bool unscaled_ = false;
  bool last_skipped_ = false;
  std::int64_t skipped_steps_ = 0;
};

}  // namespace bellows::precision
