// Where the trainer gets batches: an epoch-structured stream with a saveable position. The in-memory
// TensorSource implements it here; the prefetching pipeline (data/loader) implements the same interface.
#pragma once

#include <cstdint>
#include <optional>

#include "bellows/data/batch.h"       // defines: Batch
#include "bellows/util/state_dict.h"  // defines: StateDict

namespace bellows::data {

class BatchSource {
 public:
  virtual ~BatchSource() = default;
  virtual void start_epoch(std::int64_t epoch) = 0;   // resets to the epoch's first batch (or the saved one)
  virtual std::optional<Batch> next() = 0;            // nullopt at the end of the epoch
  virtual std::int64_t batches_per_epoch() const = 0;
  virtual std::int64_t remaining_in_epoch() const = 0;
  virtual std::int64_t samples() const = 0;           // samples per epoch
  virtual StateDict state_dict() const = 0;           // epoch, position, seed
  virtual void load_state_dict(const StateDict& state) = 0;
};

}  // namespace bellows::data
