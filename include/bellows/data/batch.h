// A batch: named tensors ("x", "y", "mask", ...) with a common first dimension, as tasks consume them.
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace bellows::data {

struct Batch {
  std::map<std::string, at::Tensor> tensors;
  std::int64_t size = 0;  // samples in the batch (first dimension)

  const at::Tensor& at(const std::string& name) const;  // kData error naming the missing tensor
  // A copy on `device`; non_blocking copies from pinned memory overlap with compute on CUDA.
  Batch to(c10::Device device, bool non_blocking = false) const;
  // Why the batch cannot be split into smaller ones ("" when it can): a tensor whose first dimension is not the
  // batch's size.
  std::string unsplittable() const;
  // Samples [start, start + count) of every tensor (views, no copy). kData error when unsplittable().
  Batch slice(std::int64_t start, std::int64_t count) const;
  // "x Float [2, 5, 64], y Long [2]": what an error about the batch shows.
  std::string shapes() const;
};

// The sizes of `parts` near-equal consecutive pieces of `size` samples (the first size % parts one larger);
// fewer pieces when size < parts (no empty ones).
std::vector<std::int64_t> split_sizes(std::int64_t size, std::int64_t parts);

}  // namespace bellows::data
