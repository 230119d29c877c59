// A module's parameters and buffers by their dotted names (as PyTorch's state_dict names them), gathered here
// once for the optimizer, EMA, freezing and checkpoints.
#pragma once

#include <ATen/core/Tensor.h>

#include <string>
#include <utility>
#include <vector>

namespace torch::nn {
class Module;
}  // namespace torch::nn

namespace bellows {

using NamedTensors = std::vector<std::pair<std::string, at::Tensor>>;  // in the module's registration order

// The parameters of `module` and its submodules: the live tensors (not detached), which an optimizer updates.
NamedTensors named_parameters(const torch::nn::Module& module);
// The parameters, then the buffers (running statistics, ...): everything a checkpoint or an EMA keeps.
NamedTensors named_state(const torch::nn::Module& module);

}  // namespace bellows
