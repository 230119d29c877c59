// Generic tasks over batches with tensors "x" (input) and "y" (target): regression (MSE; MAE metric) and
// classification (cross-entropy; accuracy metric). predict() gives the outputs (regression) or the class
// probabilities (classification), as float32 [B, outputs]. The task reaches the model's outputs through a callable
// given at construction: of the batch's "x" (Forward), or of the whole batch (BatchForward: a model with several
// inputs, such as a user's TorchScript module).
#pragma once

#include <functional>
#include <memory>

#include "bellows/models/task.h"  // defines: Task, StepOutput

namespace bellows::models {

using Forward = std::function<at::Tensor(torch::nn::Module&, const at::Tensor&)>;
using BatchForward = std::function<at::Tensor(torch::nn::Module&, const data::Batch&)>;

std::shared_ptr<Task> make_regression_task(Forward forward);
std::shared_ptr<Task> make_classification_task(Forward forward);
std::shared_ptr<Task> make_regression_task(BatchForward forward);
std::shared_ptr<Task> make_classification_task(BatchForward forward);

}  // namespace bellows::models
