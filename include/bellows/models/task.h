// The user's hook into training: given the model and a batch, return the loss and named metrics.
// Built-in models come with their tasks; C++ users write their own (examples/cpp/custom_task).
#pragma once

#include <ATen/core/Tensor.h>
#include <torch/nn/module.h>

#include <string>
#include <utility>
#include <vector>

#include "bellows/data/batch.h"  // defines: Batch

namespace bellows {

struct StepOutput {
  at::Tensor loss;  // scalar, mean over the batch
  // Per-batch means as 0-dim tensors; read (and synchronised) only when a meter logs them.
  std::vector<std::pair<std::string, at::Tensor>> metrics;
};

class Task {
 public:
  virtual ~Task() = default;
  virtual StepOutput step(torch::nn::Module& model, const data::Batch& batch) = 0;
  // Evaluation (under no-grad, model in eval mode); by default the same computation.
  virtual StepOutput eval_step(torch::nn::Module& model, const data::Batch& batch) { return step(model, batch); }
  // The metric that decides "best" and drives plateau schedules, and whether lower is better.
  virtual std::string monitor() const { return "loss"; }
  virtual bool lower_is_better() const { return true; }
};

}  // namespace bellows
