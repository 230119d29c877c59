// Optimizers on ATen's fused kernels (_fused_adamw_, _fused_adam_, _fused_sgd_; CPU and CUDA), with a
// foreach (_foreach_*) implementation where no fused kernel applies. LibTorch's own torch::optim::AdamW
// is a per-parameter loop. Each algorithm is an UpdateRule registered by name (train/optimizer_registry.h);
// Optimizer keeps what they share. Parameters are split into groups: weight decay on weights, none on biases and
// norm parameters (1-D tensors, or names matching `no_decay_patterns`). Frozen parameters
// (requires_grad == false) get no state at all.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "bellows/util/module_tensors.h"  // defines: NamedTensors
#include "bellows/util/state_dict.h"      // defines: StateDict

namespace bellows::train {

using NamedParameters = NamedTensors;  // e.g. bellows::named_parameters(module)

struct OptimizerOptions {
  std::string type = "adamw";  // a registered optimizer (train/optimizer_registry.h): adamw | adam | sgd
  double lr = 1e-3;
  double beta1 = 0.9, beta2 = 0.999;    // adam, adamw
  double eps = 1e-8;                    // adam, adamw
  double weight_decay = 0.01;           // decoupled for adamw, L2 for adam and sgd
  double momentum = 0.0;                // sgd
  double dampening = 0.0;               // sgd
  bool nesterov = false;                // sgd (needs momentum > 0 and dampening == 0, as in PyTorch)
  std::string implementation = "auto";  // auto | fused | foreach
  std::vector<std::string> no_decay_patterns = {"bias", "norm", "bn", "ln"};  // substrings of names
};

struct ParamGroup {
  std::string name;  // "decay" or "no_decay"; a group with no parameters is left out
  std::vector<std::string> names;
  std::vector<at::Tensor> params;
  double weight_decay = 0.0;
};

// True when ATen has a fused optimizer kernel for `param` (CPU or CUDA; float32/float64/float16/bfloat16;
// dense, non-overlapping memory). "auto" uses the fused kernels when this holds for every parameter.
bool fused_kernel_available(const at::Tensor& param);

class GroupStep;
class UpdateRule;

// The trainable parameters grouped as an optimizer groups them: weight decay ("decay") first, then "no_decay";
// frozen ones left out, a tied tensor kept once under its first name. The constructor's checks and errors.
std::vector<ParamGroup> param_groups(const NamedParameters& params, const OptimizerOptions& options);
// Those groups' parameters in order, with their names: the trainer's list of what trains (also where a sharded
// strategy gives this rank's optimizer only some of them).
NamedParameters trainable_parameters(const NamedParameters& params, const OptimizerOptions& options);

// Sets the gradients of `params` to undefined (no memset, no memory held): the step's end for every trainable
// parameter, also those a sharded strategy's optimizer does not update on this rank.
void clear_gradients(const std::vector<at::Tensor>& params);

class Optimizer {
 public:
  // `params`: named parameters; those with requires_grad == false are left out, a tensor listed twice
  // (tied weights) is kept once under its first name. Errors (kConfig) for an unknown type/implementation,
  // negative lr/eps/weight decay/momentum, betas outside [0, 1), nesterov without momentum or with
  // dampening, no trainable parameter, a non-floating-point parameter, or "fused" requested where no fused
  // kernel exists for a parameter's device/dtype (the message names the parameter).
  Optimizer(const NamedParameters& params, OptimizerOptions options);

  // One update of every parameter that has a gradient; a parameter whose gradient is undefined is skipped
  // (its state and step count stay as they are), as in PyTorch. State is created on first update, on the
  // parameter's device. Gradients are read, never modified.
  // found_inf (optional; float32, one element, 1 = skip): the update is skipped when it is 1 and the parameters,
  // moments, buffers and per-parameter step counts stay exactly as they were. With the fused kernels this is
  // decided on the device, with no sync (the kernels take found_inf, as torch.optim's do with a GradScaler);
  // the foreach implementation reads it on the host (one sync), and so does SGD with momentum and dampening > 0 on
  // a step where a parameter with a gradient is updated for the first time (its buffer starts as the gradient
  // only on an update that happens). With dampening 0 a new buffer starts at zero, which gives the same first
  // update, so the fused path never reads it.
  // steps() counts the call either way.
  void step(const at::Tensor& found_inf = {});
  void zero_grad();                     // sets gradients to undefined (no memset, no memory held)
  void set_lr(double lr);                // the schedule sets this before each step (and fills the lr tensor, if any)
  // From now on the fused kernels read the learning rate from a float32 tensor on `device` that set_lr fills, so a
  // step captured into a CUDA graph (train/step_graph.h) follows the schedule on replay. Needs the fused kernels
  // (kConfig error otherwise).
  void use_lr_tensor(c10::Device device);
  // Which parameters have state (moments, buffers, step counts), and dropping what was created since such a mark:
  // a CUDA graph capture that failed created state whose initialising kernels never ran (GraphStep).
  using StateMark = std::vector<std::vector<bool>>;
  StateMark state_mark() const;
  void drop_state_since(const StateMark& mark);
  // The count of step() calls, for a step that ran as a graph: a replay runs no host code (the capture counted once).
  void set_steps(std::int64_t steps) { step_count_ = steps; }
  double lr() const { return lr_; }
  std::int64_t steps() const { return step_count_; }  // calls of step(), skipped ones too (restored by load_state_dict)
  bool fused() const { return fused_; }               // which implementation was chosen
  const OptimizerOptions& options() const { return options_; }
  const std::vector<ParamGroup>& groups() const { return groups_; }
  std::vector<at::Tensor> parameters() const;  // trainable parameters, in group order
  std::int64_t state_bytes() const;             // the state tensors held now (moments, momentum buffers, step counts)

  // Keys (parameter names as given to the constructor):
  //   "lr", "steps"                        scalars
  //   "step.<name>"                        every trainable parameter: its update count (float32, 0 = no state)
  //   "<kind>.<name>"                      each state kind of the rule, parameters with step > 0:
  //     "exp_avg.<name>", "exp_avg_sq.<name>" adam/adamw
  //     "momentum_buffer.<name>"             sgd with momentum > 0
  // The tensors alias the live state (no copy): serialise or clone them before the next step().
  StateDict state_dict() const;
  // Copies the state in, onto each parameter's device and dtype. A missing entry, a shape mismatch or an
  // entry for a parameter this optimizer does not have is a kData error naming the entry; on error the
  // optimizer is left unchanged. Entries of another registered optimizer's state kinds are ignored.
  void load_state_dict(const StateDict& state);
  // The entries of a whole model's optimizer state that belong to this optimizer's parameters, with "lr" and
  // "steps": what a rank of a sharded optimizer (dist.strategy zero1) loads from a checkpoint of every parameter.
  StateDict own_entries(const StateDict& state) const;

 private:
  friend class GroupStep;  // a rule's view of one group's step (train/update_rule.h)

  void update(const at::Tensor& found_inf);  // step() after the skip decision; found_inf: none, or on-device skip
  bool has_new_parameter() const;            // a parameter with a gradient and no state yet
  // The gradient of group g's parameter i as the kernels take it, or undefined where it has none this step.
  at::Tensor kernel_gradient(std::size_t g, std::size_t i) const;
  void allocate_state();  // every kind's and the step counts' slots, all undefined
  std::vector<at::Tensor> new_step_buffers() const;  // per group: [params] float32 on their one device (fused)
  at::Tensor new_step_tensor(const std::vector<at::Tensor>& buffers, std::size_t g, std::size_t i) const;
  // One more update for each of `active` (take_back false), or one less where found_inf is 1 (take_back true).
  void count_updates(std::size_t g, const std::vector<std::size_t>& active, const at::Tensor& found_inf, bool take_back);

  OptimizerOptions options_;
  std::vector<ParamGroup> groups_;
  double lr_;
  at::Tensor lr_tensor_;  // use_lr_tensor(): the learning rate on the parameters' device; undefined otherwise
  std::int64_t step_count_ = 0;
  bool fused_ = false;
  std::shared_ptr<const UpdateRule> rule_;  // the algorithm: options_.type's entry made it
  std::vector<std::string> kinds_;          // rule_->state_kinds()
  // Per state kind (kinds_), per group, per parameter: the rule's state (Adam's moments, SGD's momentum buffers).
  std::vector<std::vector<std::vector<at::Tensor>>> state_;
  // Per group, per parameter: step tensors (float32 0-dim; on the parameter's device with the fused kernels; on the
  // CPU otherwise).
  std::vector<std::vector<at::Tensor>> state_steps_;
  // With the fused kernels, a group's step tensors are slots (views) of one buffer, so counting an update of the
  // whole group is one op, not one per parameter; undefined for a group spread over devices.
  std::vector<at::Tensor> step_buffers_;
  std::vector<bool> uniform_dtype_;  // per group: every parameter has the same dtype
};

}  // namespace bellows::train
