// A multi-layer perceptron (workload W1): Linear layers of the given widths with an activation, optional
// LayerNorm/BatchNorm after each hidden Linear, and dropout.
#pragma once

#include <torch/nn/module.h>
#include <torch/nn/modules/container/sequential.h>
#include <torch/nn/pimpl.h>

#include <string>
#include <vector>

namespace bellows::models {

struct MlpOptions {
  std::int64_t in_features = 64;
  std::vector<std::int64_t> hidden = {512, 512, 512};
  std::int64_t out_features = 1;
  std::string activation = "gelu";  // gelu | relu | silu | tanh
  std::string norm = "none";        // none | layer | batch
  double dropout = 0.0;
  std::string task = "regression";  // regression | classification: the task that trains it (not the module's)
};

class MlpImpl : public torch::nn::Module {
 public:
  explicit MlpImpl(const MlpOptions& options);
  at::Tensor forward(const at::Tensor& x);
  const MlpOptions& options() const { return options_; }

 private:
  MlpOptions options_;
  torch::nn::Sequential layers_{nullptr};
};
TORCH_MODULE(Mlp);

}  // namespace bellows::models
