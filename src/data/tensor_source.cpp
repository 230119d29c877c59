// In-memory batch source; see tensor_source.h.
#include "bellows/data/tensor_source.h"

#include <ATen/ATen.h>
#include <fmt/format.h>

#include "bellows/util/check.h"

namespace bellows::data {

TensorSource::TensorSource(std::map<std::string, at::Tensor> tensors, TensorSourceOptions options)
    : tensors_(std::move(tensors)), options_(options) {
  BELLOWS_CHECK_CONFIG(options_.batch_size > 0, fmt::format("batch_size is {}, expected >= 1", options_.batch_size),
                       "set data.batch_size to a positive integer");
  BELLOWS_CHECK_DATA(!tensors_.empty(), "the data source has no tensors", "give at least one named tensor");
  n_ = tensors_.begin()->second.size(0);
  for (const auto& [name, t] : tensors_) {
    BELLOWS_CHECK_DATA(t.dim() >= 1 && t.size(0) == n_,
                       fmt::format("tensor '{}' has {} rows, but '{}' has {}", name, t.dim() ? t.size(0) : 0,
                                   tensors_.begin()->first, n_),
                       "all tensors of a dataset need the same number of samples (first dimension)");
  }
}

std::int64_t TensorSource::batches_per_epoch() const {
  const std::int64_t b = options_.batch_size;
  return options_.drop_last ? n_ / b : (n_ + b - 1) / b;
}

std::int64_t TensorSource::remaining_in_epoch() const { return std::max<std::int64_t>(0, batches_per_epoch() - position_); }

void TensorSource::start_epoch(std::int64_t epoch) {
  if (!(resumed_ && epoch == epoch_)) position_ = 0;
  resumed_ = false;
  epoch_ = epoch;
  if (options_.shuffle) {
    auto gen = at::make_generator<at::CPUGeneratorImpl>(options_.seed + static_cast<std::uint64_t>(epoch));
    order_ = at::randperm(n_, gen, at::TensorOptions().dtype(at::kLong));
  } else {
    order_ = at::arange(n_, at::TensorOptions().dtype(at::kLong));
  }
}

std::optional<Batch> TensorSource::next() {
  BELLOWS_CHECK(order_.defined(), "TensorSource::next() before start_epoch()", "call start_epoch(epoch) first");
  if (position_ >= batches_per_epoch()) return std::nullopt;
  const std::int64_t begin = position_ * options_.batch_size;
  const std::int64_t end = std::min(begin + options_.batch_size, n_);
  const at::Tensor index = order_.slice(0, begin, end);
  Batch batch;
  batch.size = end - begin;
  for (const auto& [name, t] : tensors_) batch.tensors.emplace(name, t.index_select(0, index));
  ++position_;
  return batch;
}

StateDict TensorSource::state_dict() const {
  StateDict s;
  put_int(s, "epoch", epoch_);
  put_int(s, "position", position_);
  put_int(s, "seed", static_cast<std::int64_t>(options_.seed));
  return s;
}

void TensorSource::load_state_dict(const StateDict& state) {
  BELLOWS_CHECK_DATA(get_int(state, "seed") == static_cast<std::int64_t>(options_.seed),
                     fmt::format("data source state has seed {}, this run uses {}", get_int(state, "seed"), options_.seed),
                     "resume with the same seed, or start a new run");
  epoch_ = get_int(state, "epoch");
  position_ = get_int(state, "position");
  resumed_ = true;
}

}  // namespace bellows::data
