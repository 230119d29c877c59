// Data kept on the training device (data.on_device): a dataset's tensors placed there once and every batch
// gathered there by an index tensor on the device, with no per-batch host collation, pinning, copy or side-stream
// event (seed 000: "data stays on GPU between operations"). Only datasets whose samples are in-memory tensors can
// be resident: tables and arrays (TensorDataset: CSV, NPY/NPZ, synthetic data, the stream buffer's sessions),
// sliding windows over them, and subsets of those (train/validation splits, folds). Images and NetCDF slices are
// read and decoded per sample and stay with the prefetching loader. The Loader gathers from a ResidentData when
// LoaderOptions::on_device is set (data/loader.h); the plan decides it (plan::plan_data_placement).
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "bellows/data/batch.h"  // defines: Batch

namespace bellows::data {

class Dataset;

class ResidentData {
 public:
  virtual ~ResidentData() = default;
  // Samples `indices` (int64 [B] on the device) as one batch on the device: the tensors, dtypes and values that
  // the dataset's get_batch gives for the same indices (bitwise), before finish_on_device.
  virtual Batch gather(const at::Tensor& indices) const = 0;
};

// One placement per device, shared by every view of a dataset (the training and validation splits of one table
// place it once). Held weakly: the placement lives as long as a loader gathers from it.
class PlacementCache {
 public:
  std::shared_ptr<const ResidentData> get(c10::Device device,
                                          const std::function<std::shared_ptr<const ResidentData>()>& place) const;

 private:
  mutable std::mutex mutex_;
  mutable std::map<std::string, std::weak_ptr<const ResidentData>> placed_;
};

// The bytes that placing `datasets` on a device takes, each underlying dataset counted once (the train and
// validation subsets of one table share its placement); -1 when one of them cannot be resident.
std::int64_t placement_bytes(const std::vector<const Dataset*>& datasets);

// The first of `datasets` that cannot be resident (its name()), "" when all can.
std::string unplaceable(const std::vector<const Dataset*>& datasets);

}  // namespace bellows::data
