// Collation: samples to one batch. Tensors of equal shape are stacked. Tensors whose first dimension
// differs between samples (variable-length sequences) are padded to the longest with `pad_value`, and the
// batch gains "<name>_mask" (bool [B, L], true at real positions) and "<name>_lengths" (int64 [B]).
// Any other shape mismatch is a kData error naming the tensor, the samples and both shapes.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "bellows/data/batch.h"    // defines: Batch
#include "bellows/data/dataset.h"  // defines: Example

namespace bellows::data {

struct CollateOptions {
  double pad_value = 0;
};

// `describe` names sample i of `examples` in errors (e.g. the dataset's describe of its index).
Batch collate(const std::vector<Example>& examples, const CollateOptions& options = {},
              const std::function<std::string(std::size_t)>& describe = {});

}  // namespace bellows::data
