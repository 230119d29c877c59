// Parameters and buffers by name; see module_tensors.h.
#include "bellows/util/module_tensors.h"

#include <torch/nn/module.h>

namespace bellows {

NamedTensors named_parameters(const torch::nn::Module& module) {
  NamedTensors out;
  for (const auto& item : module.named_parameters(/*recurse=*/true)) out.emplace_back(item.key(), item.value());
  return out;
}

NamedTensors named_state(const torch::nn::Module& module) {
  NamedTensors out = named_parameters(module);
  for (const auto& item : module.named_buffers(/*recurse=*/true)) out.emplace_back(item.key(), item.value());
  return out;
}

}  // namespace bellows
