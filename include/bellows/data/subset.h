// A view of some samples of another dataset, by index: train/validation splits, cross-validation folds.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "bellows/data/dataset.h"  // defines: Dataset

namespace bellows::data {

class SubsetDataset final : public Dataset {
 public:
  // kData error for an index outside the base dataset.
  SubsetDataset(std::shared_ptr<const Dataset> base, std::vector<std::int64_t> indices, std::string label);

  std::int64_t size() const override { return static_cast<std::int64_t>(indices_.size()); }
  Example get(std::int64_t index, FetchContext& context) const override;
  Batch get_batch(std::span<const std::int64_t> indices, FetchContext& context) const override;
  std::string describe(std::int64_t index) const override;
  std::string name() const override;
  void finish_on_device(Batch& batch) const override { base_->finish_on_device(batch); }
  at::Tensor class_labels() const override;
  // The base's bytes and placement (shared with the other views of the base), gathered through this subset's
  // indices, placed beside it.
  std::int64_t resident_bytes() const override { return base_->resident_bytes(); }
  std::shared_ptr<const ResidentData> place(c10::Device device) const override;

  const Dataset& base() const { return *base_; }
  const std::vector<std::int64_t>& indices() const { return indices_; }

 private:
  std::shared_ptr<const Dataset> base_;
  std::vector<std::int64_t> indices_;
  std::string label_;
};

// Train/validation split of `n` samples: "tail" keeps the order and holds out the last fraction (time
// series: validation lies after training); "random" holds out a seeded random fraction. Returns the
// train and validation indices (validation empty when fraction * n < 1).
std::pair<std::vector<std::int64_t>, std::vector<std::int64_t>> split_indices(std::int64_t n, double fraction,
                                                                              const std::string& mode, std::uint64_t seed);

}  // namespace bellows::data
