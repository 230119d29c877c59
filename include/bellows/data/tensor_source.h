// Batches from tensors held in memory (small datasets, tests, C++ programs that already hold their data):
// a synchronous Loader over a TensorDataset, sequential or shuffled per epoch, optional drop_last, with the
// Loader's saveable position. For larger data use the Loader directly with workers.
#pragma once

#include <ATen/core/Tensor.h>

#include <map>
#include <memory>
#include <string>

#include "bellows/data/loader.h"  // defines: Loader
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

  void start_epoch(std::int64_t epoch) override { loader_->start_epoch(epoch); }
  std::optional<Batch> next() override { return loader_->next(); }
  std::int64_t batches_per_epoch() const override { return loader_->batches_per_epoch(); }
  std::int64_t remaining_in_epoch() const override { return loader_->remaining_in_epoch(); }
  std::int64_t samples() const override { return loader_->samples(); }
  StateDict state_dict() const override { return loader_->state_dict(); }
  void load_state_dict(const StateDict& state) override { loader_->load_state_dict(state); }

 private:
  std::unique_ptr<Loader> loader_;
};

}  // namespace bellows::data
