// Batches from tensors held in memory (synthetic data, small datasets, tests): sequential or shuffled with
// a per-epoch seed (seed + epoch), optional drop_last; its position is saveable for exact mid-epoch resume.
#pragma once

#include <ATen/core/Tensor.h>

#include <map>
#include <string>

#include "bellows/data/source.h"  // defines: BatchSource

namespace bellows::data {

struct TensorSourceOptions {
  std::int64_t batch_size = 32;
  bool shuffle = true;
  bool drop_last = false;
  std::uint64_t seed = 0;
};

class TensorSource final : public BatchSource {
 public:
  // All tensors share their first dimension (kData error naming the one that does not).
  TensorSource(std::map<std::string, at::Tensor> tensors, TensorSourceOptions options);

  void start_epoch(std::int64_t epoch) override;
  std::optional<Batch> next() override;
  std::int64_t batches_per_epoch() const override;
  std::int64_t remaining_in_epoch() const override;
  std::int64_t samples() const override { return n_; }
  StateDict state_dict() const override;
  void load_state_dict(const StateDict& state) override;

 private:
  std::map<std::string, at::Tensor> tensors_;
  TensorSourceOptions options_;
  std::int64_t n_ = 0;
  std::int64_t epoch_ = -1;
  std::int64_t position_ = 0;  // next batch index within the epoch
  bool resumed_ = false;       // load_state_dict set the position for the next start_epoch
  at::Tensor order_;           // sample permutation of the current epoch (int64)
};

}  // namespace bellows::data
