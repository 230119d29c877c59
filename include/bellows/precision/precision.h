// The precision policy: the one object that decides compute dtype, the autocast context, loss scaling,
// unscaling, and whether the optimizer step runs. The training loop never branches on fp16 vs bf16.
//   "fp32"        full fp32; TF32 off
//   "tf32"        fp32 tensors, TF32 tensor-core matmul/cuDNN on CUDA (no effect on the CPU)
//   "bf16-mixed"  autocast to bf16 (CPU and CUDA); no scaling
//   "fp16-mixed"  autocast to fp16 with dynamic loss scaling (GradScaler)
// Every policy checks the gradients for inf/NaN before stepping and skips (and says so) when it finds one.
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "bellows/precision/autocast.h"     // defines: AutocastGuard
#include "bellows/precision/grad_scaler.h"  // defines: GradScaler, GradScalerOptions
#include "bellows/util/state_dict.h"        // defines: StateDict

namespace bellows::precision {

struct StepOutcome {
  bool stepped = true;  // false: non-finite gradients, the optimizer did not run
};

class Precision {
 public:
  virtual ~Precision() = default;

  virtual std::string name() const = 0;                 // "fp32", "tf32", "bf16-mixed", "fp16-mixed"
  virtual c10::ScalarType autocast_dtype() const = 0;   // kFloat when no autocast

  // Sets process-wide backend flags this policy needs (TF32 on/off); called once at setup.
  virtual void configure_backends() const = 0;

  // The forward pass runs inside this guard (a no-op guard for fp32/tf32).
  virtual std::unique_ptr<AutocastGuard> autocast() const = 0;

  // What backward is called on: the loss, scaled for fp16.
  virtual at::Tensor scale_loss(const at::Tensor& loss) = 0;

  // Brings gradients to their true values (once per step) and finds non-finite ones; call before clipping.
  virtual void unscale(const std::vector<at::Tensor>& params) = 0;

  // Runs optimizer_step unless non-finite gradients were found; updates the loss scale.
  virtual StepOutcome step(const std::vector<at::Tensor>& params, const std::function<void()>& optimizer_step) = 0;

  // Metrics for the meters: "loss_scale" (fp16 only), "skipped_steps".
  virtual std::vector<std::pair<std::string, double>> metrics() const = 0;

  virtual StateDict state_dict() const = 0;
  virtual void load_state_dict(const StateDict& state) = 0;
};

// `name`: fp32 | tf32 | bf16-mixed | fp16-mixed (not "auto": the plan resolves that first).
// Unknown names raise kConfig errors listing the valid ones.
std::unique_ptr<Precision> make_precision(const std::string& name, c10::Device device,
                                          const GradScalerOptions& scaler_options = {});

}  // namespace bellows::precision
