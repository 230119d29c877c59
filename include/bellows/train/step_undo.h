// What a training step changes besides the weights, gradients and optimizer: the buffers (BatchNorm statistics,
// counters) and the RNG states (dropout draws). Trainer::measure_step_memory puts them back after its probe step,
// out-of-memory recovery (train/recovering_step.h) before it runs a step again.
#pragma once

#include <ATen/core/Tensor.h>
#include <torch/nn/module.h>

#include <vector>

#include "bellows/util/state_dict.h"  // defines: StateDict

namespace bellows::train {

class StepUndo {
 public:
  explicit StepUndo(torch::nn::Module& model);
  // Copies the buffers (made at the first save, refilled after) and the RNG states.
  void save();
  // Puts them back.
  void restore() const;

 private:
  // The buffers grouped by dtype and device: _foreach_copy_ takes its one-launch path only for tensors of one dtype
  // on one device (ResNet-18's 60 BatchNorm buffers are float32 statistics and int64 counters: 2 copies, not 60).
  struct Group {
    std::vector<at::Tensor> live, saved;
  };
  std::vector<Group> groups_;
  StateDict rng_;
};

}  // namespace bellows::train
