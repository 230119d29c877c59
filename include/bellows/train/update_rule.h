// An optimizer's algorithm (train/optimizer_registry.h registers one by name): the per-parameter state it keeps and
// its update of one parameter group on one step. train::Optimizer keeps what every algorithm shares (groups, the
// learning rate, step counts, the choice of fused or foreach kernels, the state's storage and its state dict) and
// hands each group's step to the rule as a GroupStep.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstddef>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "bellows/train/optimizer.h"  // defines: Optimizer, OptimizerOptions, ParamGroup

namespace bellows::train {

// One parameter group's update on one step, as a rule sees it: the parameters with a gradient, their gradients
// (same dtype and layout as the parameter), the rule's state and the step counts, which it creates and counts.
class GroupStep {
 public:
  const ParamGroup& group() const;
  const std::vector<std::size_t>& active() const { return active_; }  // indices into group(): those with a gradient
  const std::vector<at::Tensor>& grads() const { return grads_; }     // per parameter; undefined where not active
  // The skip flag for the fused kernels to read on the device (float32, 1 = skip), or undefined: with the foreach
  // kernels the optimizer read it on the host and calls the rule only for an update that happens.
  const at::Tensor& found_inf() const { return found_inf_; }
  bool fused() const;  // ATen's fused kernels (Optimizer::fused); otherwise the _foreach_* ops
  double lr() const;
  // `call(lr)` with the learning rate as the fused kernels take it: the device tensor of Optimizer::use_lr_tensor
  // (a step captured into a CUDA graph follows the schedule), or the number.
  template <class Call>
  void call_with_lr(Call&& call) const {
    if (lr_tensor().defined()) {
      call(lr_tensor());
    } else {
      call(lr());
    }
  }

  // The group's tensors of the rule's state kind `kind` (an index into UpdateRule::state_kinds), per parameter:
  // undefined until the rule creates them (on a parameter's first update).
  std::vector<at::Tensor>& state(std::size_t kind);
  // Per parameter, its update count (float32, 0-dim): on the parameter's device with the fused kernels, on the CPU
  // otherwise; undefined before its first update.
  std::vector<at::Tensor>& steps();
  bool started(std::size_t i) const { return steps_of(i).defined(); }  // updated before (or its state loaded)
  void start(std::size_t i);  // its step count at 0, where the kernels read it (call on its first update)
  // One more update for each active parameter; and one less where found_inf is 1 (the fused kernels skip on the
  // device, where the count goes back down without a sync).
  void count_updates();
  void take_back_skipped();
  // Every parameter of the group has a gradient, one device and one dtype, with the fused kernels: one call over the
  // group's own lists, no bucketing.
  bool whole_group_in_one_call() const;

 private:
  friend class Optimizer;  // makes one per group on each step
  // Gathers the group's parameters with a gradient, and those gradients as the kernels take them.
  GroupStep(Optimizer& optimizer, std::size_t group, const at::Tensor& found_inf);

  const at::Tensor& lr_tensor() const;
  const at::Tensor& steps_of(std::size_t i) const;

  Optimizer& optimizer_;
  std::size_t g_;
  std::vector<std::size_t> active_;
  std::vector<at::Tensor> grads_;
  at::Tensor found_inf_;
};

// The algorithm. Stateless itself (its options are fixed when the entry makes it): everything that changes lives in
// the Optimizer, so a rule is shared between copies.
class UpdateRule {
 public:
  virtual ~UpdateRule() = default;
  // The per-parameter state it keeps with its options, by the names that key it in the state dict ("exp_avg",
  // "exp_avg_sq"; "momentum_buffer"); their count is its memory per parameter in the plan.
  virtual std::vector<std::string> state_kinds() const = 0;
  // True when found_inf must be read on the host on a step where a parameter is updated for the first time, though
  // the kernels are fused (SGD with momentum and dampening: its buffer starts as the gradient only on an update that
  // happens).
  virtual bool first_update_reads_found_inf() const { return false; }
  // One update of the group's active parameters (the optimizer chose the kernels: step.fused()).
  virtual void update(GroupStep& step) const = 0;
};

// Helpers for rules. Indices of `active` grouped by (device, dtype): the fused kernels and the foreach fast paths
// want one device and one dtype per call.
std::vector<std::vector<std::size_t>> device_dtype_buckets(const std::vector<at::Tensor>& params,
                                                           const std::vector<std::size_t>& active);
std::vector<at::Tensor> pick(const std::vector<at::Tensor>& from, const std::vector<std::size_t>& idx);
// found_inf where the kernel runs (a no-op when it is there already); none when not given.
std::optional<at::Tensor> on_device_of(const at::Tensor& found_inf, const at::Tensor& param);

}  // namespace bellows::train
