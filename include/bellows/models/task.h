// The user's hook into training: given the model and a batch, return the loss and named metrics; and, for
// tasks that can, predictions for new inputs (`bellows predict`). Built-in models come with their tasks;
// C++ users write their own (examples/cpp/custom_task).
#pragma once

#include <ATen/core/Tensor.h>
#include <torch/nn/module.h>

#include <cstdint>
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

// What predict() is asked for. Deterministic tasks use none of it except `samples` (which must be 1).
struct PredictOptions {
  std::int64_t samples = 1;      // draws per input from generative tasks (>= 1)
  std::uint64_t seed = 0;        // seed of the draws
  std::int64_t first_index = 0;  // index of the batch's first row in the whole input: per-row random streams
                                 // (mix of seed and row index) make results independent of the batch size
  std::int64_t steps = 0;        // diffusion: 0 = the model's full ancestral schedule; else DDIM over this many
  double eta = 0.0;              // diffusion, DDIM: 0 deterministic, 1 ancestral-like noise
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
  // Predictions for batch "x" (the model on the right device, in eval mode; runs under no-grad), one row per
  // input row (dim 0 is the batch), so that batches concatenate along dim 0. The default is a kUsage error:
  // a task predicts only if it says how.
  virtual at::Tensor predict(torch::nn::Module& model, const data::Batch& batch, const PredictOptions& options);
};

}  // namespace bellows
