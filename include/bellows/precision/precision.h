// The precision policy: the one object that decides compute dtype, the autocast context, loss scaling,
// unscaling, and whether the optimizer step runs. The training loop never branches on fp16 vs bf16. The policies
// are registered (precision/registry.h: fp32, tf32, bf16-mixed, fp16-mixed, one file each in
// src/precision/policies/); what the rest of bellows needs to know of one is its entry's.
// Every policy checks the gradients for inf/NaN before stepping and skips (and says so) when it finds one.
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "bellows/precision/autocast.h"     // defines: AutocastGuard
#include "bellows/precision/grad_scaler.h"  // defines: GradScaler, GradScalerOptions
#include "bellows/precision/registry.h"     // defines: PrecisionEntry, find_precision
#include "bellows/util/state_dict.h"        // defines: StateDict

namespace bellows::precision {

struct StepOutcome {
  bool stepped = true;  // false: non-finite gradients, the optimizer did not run
};

class Precision {
 public:
  virtual ~Precision() = default;

  virtual const PrecisionEntry& entry() const = 0;  // its registered entry: capabilities and needs
  std::string name() const;                         // "fp32", "tf32", "bf16-mixed", "fp16-mixed"
  c10::ScalarType autocast_dtype() const;           // kFloat when no autocast
  bool scales_loss() const;                         // dynamic loss scaling: overflowing steps are skipped by design

  // Sets process-wide backend flags this policy needs (TF32 on/off); called once at setup.
  virtual void configure_backends() const = 0;

  // The forward pass runs inside this guard: `auto guard = precision.autocast();`. fp32/tf32 return a disabled
  // guard (an fp32 region, even inside an outer autocast), or null on a device type without autocast.
  virtual std::unique_ptr<AutocastGuard> autocast() const = 0;

  // What backward is called on: the loss, scaled for fp16.
  virtual at::Tensor scale_loss(const at::Tensor& loss) = 0;

  // Brings gradients to their true values (once per step); call before clipping. fp16-mixed divides them by the
  // loss scale and records non-finite ones on the device; the other policies leave them as they are (their
  // non-finite check is step_on_device()'s flag, or step()'s own pass).
  virtual void unscale(const std::vector<at::Tensor>& params) = 0;

  // The training loop's step, with no sync: `nonfinite` (float32, 0-dim, 0 or 1; 1 = some gradient is inf/NaN;
  // the trainer derives it from the gradient norm it computes anyway) and, for fp16, unscale's check decide on
  // the device whether optimizer_step(found_inf) updates anything (see GradScaler::step_on_device); the loss
  // scale is updated on the device. Returns found_inf (1: skipped). skipped_steps() reads the count.
  virtual at::Tensor step_on_device(const std::vector<at::Tensor>& params, const at::Tensor& nonfinite,
                                    const std::function<void(const at::Tensor&)>& optimizer_step) = 0;

  // Forgets a step that did not run (a failed CUDA graph capture): the loss scaler's per-step state.
  virtual void abandon_step() = 0;
  // Steps skipped on non-finite gradients so far (restored by load_state_dict); reads the device.
  virtual std::int64_t skipped_steps() const = 0;

  // Unscales if unscale() was not called, runs optimizer_step unless non-finite gradients were found, and
  // updates the loss scale (GradScaler::step + update). Parameters without a gradient are ignored.
  virtual StepOutcome step(const std::vector<at::Tensor>& params, const std::function<void()>& optimizer_step) = 0;

  // Metrics for the meters: "loss_scale" (fp16 only), "skipped_steps".
  virtual std::vector<std::pair<std::string, double>> metrics() const = 0;

  // The GradScaler's state ("skipped_steps"; fp16 also "scale", "growth_tracker", the factors and interval).
  virtual StateDict state_dict() const = 0;
  virtual void load_state_dict(const StateDict& state) = 0;
};

// `name`: a registered policy (not "auto": the plan resolves that first). Unknown names raise kConfig errors listing
// the valid ones. `scaler_options` apply to policies that scale the loss (the others run a disabled GradScaler: inf/NaN
// check, no scaling). `device`: where the model runs (its type picks the autocast device type).
std::unique_ptr<Precision> make_precision(const std::string& name, c10::Device device,
                                          const GradScalerOptions& scaler_options = {});

}  // namespace bellows::precision
