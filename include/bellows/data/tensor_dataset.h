// A Dataset over tensors that share their first dimension: CSV tables read into memory, NPY/NPZ arrays
// (memory-mapped or loaded), synthetic data. A batch is one index_select per tensor, not a stack of samples.
#pragma once

#include <ATen/core/Tensor.h>

#include <functional>
#include <map>
#include <optional>
#include <string>

#include "bellows/data/dataset.h"   // defines: Dataset, DataFacts
#include "bellows/data/resident.h"  // defines: ResidentData, PlacementCache

namespace bellows::data {

struct TensorDatasetOptions {
  std::string name = "tensors";                             // for name(): "csv data/train.csv (...)"
  std::function<std::string(std::int64_t)> describe;        // empty: "sample <index>"
  std::optional<at::ScalarType> float_dtype;                 // cast floating tensors per batch (float64 -> float32)
  // What the source knows beyond the tensors, for the models: a CSV table's categorical columns (column -> its
  // values by index, CsvTable::categories), a synthetic grid's coordinates, synthetic pairs' vocabulary.
  DataFacts facts;
};

class TensorDataset final : public Dataset {
 public:
  // All tensors share their first dimension (kData error naming the one that does not).
  TensorDataset(std::map<std::string, at::Tensor> tensors, TensorDatasetOptions options = {});

  std::int64_t size() const override { return n_; }
  Example get(std::int64_t index, FetchContext& context) const override;
  Batch get_batch(std::span<const std::int64_t> indices, FetchContext& context) const override;
  std::string describe(std::int64_t index) const override;
  std::string name() const override { return options_.name; }
  at::Tensor class_labels() const override;  // "y" when it is int64 [N]
  std::int64_t resident_bytes() const override;
  std::shared_ptr<const ResidentData> place(c10::Device device) const override;

  const std::map<std::string, at::Tensor>& tensors() const { return tensors_; }
  const DataFacts& facts() const { return options_.facts; }

 private:
  std::map<std::string, at::Tensor> tensors_;
  TensorDatasetOptions options_;
  std::int64_t n_ = 0;
  PlacementCache placed_;
};

}  // namespace bellows::data
