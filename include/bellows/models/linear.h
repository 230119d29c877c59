// A torch::nn::Linear applied with at::linear. LibTorch's Linear::forward (torch/nn/functional/linear.h) runs
// matmul and then `output += bias` for inputs of more than two dimensions: one more read and write of the
// whole output than at::linear, which folds the leading dimensions into a single addmm with the bias inside
// the GEMM, and which Python's nn.Linear calls. The values are the same in fp32; under bf16 autocast the bias is
// added inside the GEMM, as in PyTorch. Models call this for [batch, tokens or nodes, features] inputs.
#pragma once

#include <ATen/ATen.h>
#include <torch/nn/modules/linear.h>

namespace bellows::models {

inline at::Tensor linear(const torch::nn::Linear& layer, const at::Tensor& x) { return at::linear(x, layer->weight, layer->bias); }

}  // namespace bellows::models
