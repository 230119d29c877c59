// Tensor-backed dataset; see tensor_dataset.h.
#include "bellows/data/tensor_dataset.h"

#include <ATen/ATen.h>
#include <fmt/format.h>

#include <chrono>

#include "bellows/util/check.h"
#include "bellows/util/timer.h"  // defines: seconds_since

namespace bellows::data {

TensorDataset::TensorDataset(std::map<std::string, at::Tensor> tensors, TensorDatasetOptions options)
    : tensors_(std::move(tensors)), options_(std::move(options)) {
  BELLOWS_CHECK_DATA(!tensors_.empty(), fmt::format("{}: no tensors", options_.name), "give at least one named tensor");
  const auto& [first_name, first] = *tensors_.begin();
  BELLOWS_CHECK_DATA(first.dim() >= 1, fmt::format("{}: tensor '{}' is a scalar", options_.name, first_name),
                     "every tensor needs a first (sample) dimension");
  n_ = first.size(0);
  for (const auto& [name, t] : tensors_) {
    BELLOWS_CHECK_DATA(t.dim() >= 1 && t.size(0) == n_,
                       fmt::format("{}: tensor '{}' has {} samples, but '{}' has {}", options_.name, name,
                                   t.dim() ? t.size(0) : 0, first_name, n_),
                       "all tensors of a dataset need the same number of samples (first dimension)");
  }
}

namespace {
at::Tensor cast(const at::Tensor& t, const std::optional<at::ScalarType>& dtype) {
  return dtype && at::isFloatingType(t.scalar_type()) && t.scalar_type() != *dtype ? t.to(*dtype) : t;
}
}  // namespace

Example TensorDataset::get(std::int64_t index, FetchContext& context) const {
  BELLOWS_CHECK(index >= 0 && index < n_, fmt::format("{}: sample {} out of range [0, {})", options_.name, index, n_),
                "report this bug");
  Example e;
  for (const auto& [name, t] : tensors_) e.emplace(name, cast(t[index], options_.float_dtype).clone());
  return e;
}

Batch TensorDataset::get_batch(std::span<const std::int64_t> indices, FetchContext& context) const {
  const auto start = std::chrono::steady_clock::now();
  const at::Tensor index =
      at::from_blob(const_cast<std::int64_t*>(indices.data()), {static_cast<std::int64_t>(indices.size())}, at::kLong);
  Batch batch;
  batch.size = static_cast<std::int64_t>(indices.size());
  // A gather per tensor; for memory-mapped arrays this is where pages are read, so it counts as "read".
  for (const auto& [name, t] : tensors_) batch.tensors.emplace(name, cast(t.index_select(0, index), options_.float_dtype));
  context.times.read += seconds_since(start);
  return batch;
}

namespace {
// The tensors of a TensorDataset on a device, cast as get_batch casts them: a gather is an index_select each, the
// same values as casting after the host gather (a cast is elementwise).
class ResidentTensors final : public ResidentData {
 public:
  explicit ResidentTensors(std::map<std::string, at::Tensor> tensors) : tensors_(std::move(tensors)) {}
  Batch gather(const at::Tensor& indices) const override {
    Batch batch;
    batch.size = indices.size(0);
    for (const auto& [name, t] : tensors_) batch.tensors.emplace(name, t.index_select(0, indices));
    return batch;
  }

 private:
  std::map<std::string, at::Tensor> tensors_;
};
}  // namespace

std::int64_t TensorDataset::resident_bytes() const {
  std::int64_t bytes = 0;
  for (const auto& [name, t] : tensors_) {
    const at::ScalarType dtype =
        options_.float_dtype && at::isFloatingType(t.scalar_type()) ? *options_.float_dtype : t.scalar_type();
    bytes += t.numel() * static_cast<std::int64_t>(c10::elementSize(dtype));
  }
  return bytes;
}

std::shared_ptr<const ResidentData> TensorDataset::place(c10::Device device) const {
  return placed_.get(device, [&] {
    std::map<std::string, at::Tensor> placed;
    // A memory-mapped array on the CPU stays mapped (to() returns it as it is) unless it is cast.
    for (const auto& [name, t] : tensors_) placed.emplace(name, cast(t, options_.float_dtype).to(device));
    return std::make_shared<ResidentTensors>(std::move(placed));
  });
}

at::Tensor TensorDataset::class_labels() const {
  auto it = tensors_.find("y");
  if (it == tensors_.end() || it->second.dim() != 1 || it->second.scalar_type() != at::kLong) return {};
  return it->second;
}

std::string TensorDataset::describe(std::int64_t index) const {
  return options_.describe ? options_.describe(index) : fmt::format("{} sample {}", options_.name, index);
}

}  // namespace bellows::data
