// A batch: named tensors ("x", "y", "mask", ...) with a common first dimension, as tasks consume them.
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>

#include <cstdint>
#include <map>
#include <string>

namespace bellows::data {

struct Batch {
  std::map<std::string, at::Tensor> tensors;
  std::int64_t size = 0;  // samples in the batch (first dimension)

  const at::Tensor& at(const std::string& name) const;  // kData error naming the missing tensor
  // A copy on `device`; non_blocking copies from pinned memory overlap with compute on CUDA.
  Batch to(c10::Device device, bool non_blocking = false) const;
};

}  // namespace bellows::data
