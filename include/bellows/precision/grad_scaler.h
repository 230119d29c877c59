// Dynamic loss scaling for fp16 training, with PyTorch's documented GradScaler semantics, on ATen's kernels
// (_amp_foreach_non_finite_check_and_unscale_, _amp_update_scale_; CPU and CUDA): scale 2^16 at start, x2
// after `growth_interval` clean steps, x0.5 and a skipped step when any gradient is inf/NaN; gradients are
// unscaled exactly once per step, before clipping. Beyond PyTorch (#55585, #67590): step() says whether it
// skipped, and the skip count and current scale are readable metrics.
//
// One step:  scale(loss).backward();  unscale_(params);  clip;  step(params, optimizer_step);  update();
// Gradients are grouped per device and dtype for the kernel, as torch.amp.GradScaler does; each device gets its
// own found_inf, combined on the scale's device in update(). Parameters without a gradient are ignored.
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>

#include <cstdint>
#include <functional>
#include <utility>
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
  // Invalid options (init_scale not positive and finite, growth_factor < 1, backoff_factor outside (0, 1],
  // growth_interval < 1) are kConfig errors. The scale starts on the CPU and moves on first use.
  explicit GradScaler(GradScalerOptions options = {});

  // loss * scale (the scale tensor moves to the loss's device on first use). Disabled: `loss` itself.
  at::Tensor scale(const at::Tensor& loss);

  // Divides the gradients of `params` by the scale in place and records whether any is inf/NaN.
  // Idempotent within a step: a second call before step()/update() does nothing.
  // Disabled: only the inf/NaN check (inv_scale = 1), gradients keep their values.
  // Enabled, fp16 gradients are refused (kConfig), as in PyTorch: unscaling them in fp16 loses the very
  // range the scale protects; keep fp32 master parameters and let autocast cast.
  void unscale_(const std::vector<at::Tensor>& params);

  // Unscales if not yet done, then runs `optimizer_step` unless a non-finite gradient was found.
  // Returns true when the optimizer stepped, false when the step was skipped. A second step() before update()
  // is a kInternal error. Syncs with the device once (to read found_inf), as PyTorch's step() does;
  // step_on_device() below does not.
  bool step(const std::vector<at::Tensor>& params, const std::function<void()>& optimizer_step);

  // step() without reading anything back to the host, for a training loop that must not wait for the device
  // (and for CUDA graphs). `nonfinite`: the caller's own check of this step's gradients (float32, 0-dim, exactly
  // 0 or 1; 1 = non-finite), e.g. from the gradient norm it computes anyway; undefined: none. Enabled, the gradients are
  // unscaled first (if not yet) and found_inf combines unscale_'s check with `nonfinite`; disabled, `nonfinite`
  // is the check (no pass over the gradients), or, when undefined, unscale_'s check pass runs.
  // optimizer_step(found_inf) must leave everything unchanged when found_inf is 1: train::Optimizer::step does,
  // on the device with fused kernels. Skips are counted on the device; skipped_steps() and last_step_skipped()
  // read them (a sync), so a loop reads them at its logging boundary. Returns found_inf (on `nonfinite`'s device,
  // or the gradients'), 1 when this step was skipped.
  at::Tensor step_on_device(const std::vector<at::Tensor>& params, const at::Tensor& nonfinite,
                            const std::function<void(const at::Tensor&)>& optimizer_step);

  // Adjusts the scale for the next step (growth/backoff) and resets the per-step state. With no gradient seen
  // this step it counts as a clean step.
  void update();

  // Forgets the step under way (found_inf, unscaled, stepped), for a step that did not run: a CUDA graph capture
  // that failed part-way (train/step_graph.h). The scale, tracker and skip count are as they were.
  void abandon_step();
  double get_scale() const;             // 1.0 when disabled; syncs with the scale's device
  std::int64_t growth_tracker() const;  // consecutive clean steps since the last growth or backoff
  std::int64_t skipped_steps() const;   // by step() and step_on_device(); the latter's are read from the device
  bool last_step_skipped() const;       // the last step()/step_on_device(); reads the device for the latter
  bool is_enabled() const { return options_.enabled; }
  const GradScalerOptions& options() const { return options_; }

  // Keys: "skipped_steps" always; enabled also "scale", "growth_tracker", "growth_factor", "backoff_factor",
  // "growth_interval" (0-dim CPU tensors). Call between steps (after update()). Loading restores the factors
  // and interval too, as PyTorch's load_state_dict does; the tensors stay where they are, or, before first use,
  // move to the gradients' (or loss's) device when first used, so a CUDA checkpoint loads on a CPU run.
  StateDict state_dict() const;
  void load_state_dict(const StateDict& state);

 private:
  void place(c10::Device device);                      // moves scale/tracker to `device` once, on first use
  const at::Tensor& found_inf_on(c10::Device device);  // this step's found_inf for `device`, made on demand
  at::Tensor inv_scale_on(c10::Device device) const;
  void reset_step();

  GradScalerOptions options_;
  at::Tensor scale_;           // float32, 0-dim; on the CPU until placed on the gradients' device
  at::Tensor growth_tracker_;  // int32, 0-dim, beside scale_
  bool placed_ = false;
  std::vector<std::pair<c10::Device, at::Tensor>> found_inf_;  // float32 0-dim per gradient device, this step
  at::Tensor step_found_;      // step_on_device(): this step's combined found_inf, for update()
  bool unscaled_ = false;
  bool stepped_ = false;
  bool last_skipped_ = false;  // step()
  at::Tensor last_found_;      // step_on_device(): the last step's found_inf (undefined after step())
  std::int64_t skipped_steps_ = 0;     // by step()
  at::Tensor skipped_on_device_;       // float64 0-dim: by step_on_device(), counted where the flags are
};

}  // namespace bellows::precision
