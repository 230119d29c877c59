// Generic tasks over batches with tensors "x" (input) and "y" (target): regression (MSE; MAE metric) and
// classification (cross-entropy; accuracy metric). predict() gives the outputs (regression) or the class
// probabilities (classification), as float32 [B, outputs]. The model must have a forward(Tensor) -> Tensor that
// the task reaches through a callable given at construction.
#pragma once

#include <functional>
#include <memory>

#include "bellows/models/task.h"  // defines: Task, StepOutput

namespace bellows::models {

using Forward = std::function<at::Tensor(torch::nn::Module&, const at::Tensor&)>;

std::shared_ptr<Task> make_regression_task(Forward forward);
std::shared_ptr<Task> make_classification_task(Forward forward);

}  // namespace bellows::models
