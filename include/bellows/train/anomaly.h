// detect_anomaly's checks (TrainerOptions::detect_anomaly; seed 001's NaN hunt, PyTorch's detect_anomaly): each
// finds the first non-finite tensor of a training step and stops the run with a kData error naming the step, the
// phase and the tensor. Each waits for the device.
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/util/Exception.h>
#include <torch/nn/module.h>

#include <cstdint>
#include <vector>

#include "bellows/data/batch.h"  // defines: Batch

namespace bellows::precision {
class Precision;
}

namespace bellows::train {

// After a forward of optimizer step `number` (from 1): the batch's inputs, then the loss (naming the first
// non-finite parameter, or the largest one when all are finite: the forward overflowed).
void check_forward(const torch::nn::Module& model, const data::Batch& batch, const at::Tensor& loss, std::int64_t number);
// An error in backward under autograd's anomaly mode: the backward function that made a NaN.
[[noreturn]] void fail_backward(const c10::Error& error, std::int64_t number);
// Every gradient before the optimizer (not under a policy whose loss scaler skips such steps by design), from the
// gradient norms the step clips by (`norms`, of the parameters params[indices[k]]; where the ranks hold shares of the
// gradients, every parameter's, combined over the ranks, so every rank names the same first parameter and stops
// alike): the first non-finite one, with its count of non-finite values where this rank holds the gradient.
void check_gradient_norms(const torch::nn::Module& model, const std::vector<at::Tensor>& params, const at::Tensor& norms,
                          const std::vector<std::int32_t>& indices, const precision::Precision& precision, std::int64_t number);
// Every parameter after optimizer step `step` (the steps taken, this one included) ran at learning rate `lr`.
void check_parameters(const torch::nn::Module& model, std::int64_t step, double lr);

}  // namespace bellows::train
