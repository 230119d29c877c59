// Exponential moving average of a model's parameters (and a copy of its buffers):
//   ema = decay * ema + (1 - decay) * param, every `every_n_steps` optimizer steps.
// For evaluation with EMA weights, swap() exchanges live and EMA values in place (call again to restore).
#pragma once

#include <ATen/core/Tensor.h>

#include <string>
#include <utility>
#include <vector>

#include "bellows/util/state_dict.h"  // defines: StateDict

namespace bellows::train {

struct EmaOptions {
  double decay = 0.999;
  std::int64_t every_n_steps = 1;
  std::int64_t start_step = 0;  // no averaging before this optimizer step (the EMA copies the weights)
};

class Ema {
 public:
  // `tensors`: the model's named parameters and buffers; the EMA keeps fp32 copies on the same device.
  Ema(const std::vector<std::pair<std::string, at::Tensor>>& tensors, EmaOptions options);

  void update(std::int64_t optimizer_step);  // call after each optimizer step
  void swap();                               // exchange live and EMA values (for eval, and back)
  const std::vector<std::pair<std::string, at::Tensor>>& averaged() const { return averaged_; }

  StateDict state_dict() const;
  void load_state_dict(const StateDict& state);

 private:
  EmaOptions options_;
  std::vector<std::pair<std::string, at::Tensor>> live_;
  std::vector<std::pair<std::string, at::Tensor>> averaged_;
  std::int64_t updates_ = 0;
};

}  // namespace bellows::train
