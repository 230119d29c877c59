// Optimizers on ATen's fused kernels (_fused_adamw_, _fused_adam_, _fused_sgd_; CPU and CUDA), with a
// foreach (_foreach_*) implementation where no fused kernel applies. LibTorch's own torch::optim::AdamW
// is a per-parameter loop. Parameters are split into groups: weight decay on weights, none on biases and
// norm parameters (1-D tensors, or names matching `no_decay_patterns`). Frozen parameters
// (requires_grad == false) get no state at all.
#pragma once

#include <ATen/core/Tensor.h>

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "bellows/util/state_dict.h"  // defines: StateDict

namespace bellows::train {

using NamedParameters = std::vector<std::pair<std::string, at::Tensor>>;

struct OptimizerOptions {
  std::string type = "adamw";        // adamw | adam | sgd
  double lr = 1e-3;
  double beta1 = 0.9, beta2 = 0.999;  // adam, adamw
  double eps = 1e-8;                  // adam, adamw
  double weight_decay = 0.01;         // decoupled for adamw, L2 for adam and sgd
  double momentum = 0.0;              // sgd
  double dampening = 0.0;             // sgd
  bool nesterov = false;              // sgd
  std::string implementation = "auto";  // auto | fused | foreach
  std::vector<std::string> no_decay_patterns = {"bias", "norm", "bn", "ln"};  // substrings of names
};

struct ParamGroup {
  std::string name;                  // "decay" or "no_decay"
  std::vector<std::string> names;
  std::vector<at::Tensor> params;
  double weight_decay = 0.0;
};

class Optimizer {
 public:
  // Errors (kConfig) for an unknown type/implementation, negative lr, betas outside [0, 1), nesterov without
  // momentum, or "fused" requested where no fused kernel exists for the parameters' device/dtype.
  Optimizer(const NamedParameters& params, OptimizerOptions options);

  void step();                         // one update of every parameter that has a gradient
  void zero_grad();                    // sets gradients to undefined (no memset, no memory held)
  void set_lr(double lr) { lr_ = lr; } // the schedule sets this before each step
  double lr() const { return lr_; }
  std::int64_t steps() const { return step_count_; }
  bool fused() const { return fused_; }  // which implementation was chosen
  const std::vector<ParamGroup>& groups() const { return groups_; }
  std::vector<at::Tensor> parameters() const;  // trainable parameters, in group order

  StateDict state_dict() const;        // moments, momentum buffers, step tensors, lr, step count
  void load_state_dict(const StateDict& state);  // kData error naming the first mismatched entry

 private:
  OptimizerOptions options_;
  std::vector<ParamGroup> groups_;
  double lr_;
  std::int64_t step_count_ = 0;
  bool fused_ = false;
  // Per group, per parameter: first/second moments (adam*), momentum buffers (sgd), step tensors.
  std::vector<std::vector<at::Tensor>> exp_avg_, exp_avg_sq_, momentum_buffer_, state_steps_;
};

}  // namespace bellows::train
