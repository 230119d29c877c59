// Deterministic synthetic datasets for the embedded demo and tests: inputs x ~ N(0, 1) and targets from a
// fixed random "teacher" network, so a model can learn them and the loss visibly falls.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <map>
#include <string>

namespace bellows::data {

struct SyntheticOptions {
  std::string kind = "regression";  // regression: y = teacher(x) + noise; classification: y = argmax teacher(x)
  std::int64_t samples = 16384;
  std::int64_t features = 64;
  std::int64_t classes = 10;        // classification only
  double noise = 0.05;              // regression only: std of the added noise
  std::uint64_t seed = 0;
};

// {"x": float32 [samples, features], "y": float32 [samples, 1] or int64 [samples]}
std::map<std::string, at::Tensor> make_synthetic(const SyntheticOptions& options);

// Splits tensors along the first dimension: the first (1 - fraction) for training, the rest for validation.
std::pair<std::map<std::string, at::Tensor>, std::map<std::string, at::Tensor>> split_tail(
    const std::map<std::string, at::Tensor>& tensors, double fraction);

}  // namespace bellows::data
