// Subsets and splits; see subset.h.
#include "bellows/data/subset.h"

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "bellows/data/resident.h"
#include "bellows/util/check.h"

namespace bellows::data {

SubsetDataset::SubsetDataset(std::shared_ptr<const Dataset> base, std::vector<std::int64_t> indices, std::string label)
    : base_(std::move(base)), indices_(std::move(indices)), label_(std::move(label)) {
  const std::int64_t n = base_->size();
  for (const std::int64_t i : indices_) {
    BELLOWS_CHECK_DATA(i >= 0 && i < n, fmt::format("{} subset refers to sample {}, {} has {}", label_, i, base_->name(), n),
                       "build the subset from this dataset's indices");
  }
}

Example SubsetDataset::get(std::int64_t index, FetchContext& context) const { return base_->get(indices_.at(index), context); }

Batch SubsetDataset::get_batch(std::span<const std::int64_t> indices, FetchContext& context) const {
  std::vector<std::int64_t> mapped;
  mapped.reserve(indices.size());
  for (const std::int64_t i : indices) mapped.push_back(indices_.at(static_cast<std::size_t>(i)));
  return base_->get_batch(mapped, context);
}

namespace {
class ResidentSubset final : public ResidentData {
 public:
  ResidentSubset(std::shared_ptr<const ResidentData> base, at::Tensor indices) : base_(std::move(base)), indices_(std::move(indices)) {}
  Batch gather(const at::Tensor& indices) const override { return base_->gather(indices_.index_select(0, indices)); }

 private:
  std::shared_ptr<const ResidentData> base_;
  at::Tensor indices_;  // int64 [size()] on the device: this subset's sample i is the base's indices_[i]
};
}  // namespace

std::shared_ptr<const ResidentData> SubsetDataset::place(c10::Device device) const {
  std::shared_ptr<const ResidentData> base = base_->place(device);
  if (!base) return nullptr;
  return std::make_shared<ResidentSubset>(std::move(base), at::tensor(indices_, at::kLong).to(device));
}

at::Tensor SubsetDataset::class_labels() const {
  const at::Tensor all = base_->class_labels();
  if (!all.defined()) return {};
  return all.index_select(0, at::tensor(indices_, at::kLong));
}

std::string SubsetDataset::describe(std::int64_t index) const { return base_->describe(indices_.at(index)); }

std::string SubsetDataset::name() const { return fmt::format("{}, {} split: {} samples", base_->name(), label_, indices_.size()); }

std::pair<std::vector<std::int64_t>, std::vector<std::int64_t>> split_indices(std::int64_t n, double fraction,
                                                                              const std::string& mode, std::uint64_t seed) {
  BELLOWS_CHECK_CONFIG(fraction >= 0 && fraction < 1, fmt::format("validation fraction {} outside [0, 1)", fraction),
                       "set data.val_fraction between 0 and 1");
  BELLOWS_CHECK_CONFIG(mode == "tail" || mode == "random", fmt::format("split mode '{}' is not known", mode), "use tail or random");
  const auto n_val = static_cast<std::int64_t>(std::floor(static_cast<double>(n) * fraction));
  std::vector<std::int64_t> order(static_cast<std::size_t>(n));
  for (std::int64_t i = 0; i < n; ++i) order[static_cast<std::size_t>(i)] = i;
  if (mode == "random" && n_val > 0) {
    auto gen = at::make_generator<at::CPUGeneratorImpl>(mix_seed(seed, 0x5B117));
    const at::Tensor perm = at::randperm(n, gen, at::TensorOptions().dtype(at::kLong));
    std::copy_n(perm.data_ptr<std::int64_t>(), n, order.begin());
    // Each side keeps file order, which helps locality when reading.
    std::sort(order.begin(), order.end() - n_val);
    std::sort(order.end() - n_val, order.end());
  }
  return {std::vector<std::int64_t>(order.begin(), order.end() - n_val), std::vector<std::int64_t>(order.end() - n_val, order.end())};
}

}  // namespace bellows::data
