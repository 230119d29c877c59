// Cross-validation folds; see folds.h.
#include "bellows/data/folds.h"

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <map>

#include "bellows/data/dataset.h"  // defines: mix_seed
#include "bellows/util/check.h"
#include "bellows/util/format.h"  // defines: shape_of

namespace bellows::data {

std::vector<std::int64_t> assign_folds(std::int64_t n, std::int64_t k, std::uint64_t seed, const at::Tensor& labels) {
  BELLOWS_CHECK_CONFIG(k >= 2, fmt::format("cross-validation with {} folds", k), "use --folds 2 or more (5 is usual)");
  BELLOWS_CHECK_CONFIG(k <= n, fmt::format("{} folds but only {} samples: a fold would hold out nothing", k, n),
                       fmt::format("use at most {} folds, or more data", n));
  // Groups of samples dealt one after the other: every class (in class order), or all samples as one group.
  std::map<std::int64_t, std::vector<std::int64_t>> groups;
  if (labels.defined()) {
    BELLOWS_CHECK_CONFIG(labels.dim() == 1 && labels.size(0) == n,
                         fmt::format("stratification labels have shape {}, expected [{}]", shape_of(labels), n),
                         "pass one class index per sample");
    const at::Tensor l = labels.to(at::kLong).contiguous();
    const auto* p = l.data_ptr<std::int64_t>();
    for (std::int64_t i = 0; i < n; ++i) groups[p[i]].push_back(i);
  } else {
    auto& all = groups[0];
    for (std::int64_t i = 0; i < n; ++i) all.push_back(i);
  }
  auto gen = at::make_generator<at::CPUGeneratorImpl>(mix_seed(seed, 0xF01D5));
  std::vector<std::int64_t> folds(static_cast<std::size_t>(n), -1);
  std::int64_t next = 0;
  for (auto& [label, members] : groups) {
    const auto m = static_cast<std::int64_t>(members.size());
    const at::Tensor perm = at::randperm(m, gen, at::TensorOptions().dtype(at::kLong));
    const auto* q = perm.data_ptr<std::int64_t>();
    for (std::int64_t j = 0; j < m; ++j) {
      folds[static_cast<std::size_t>(members[static_cast<std::size_t>(q[j])])] = next;
      next = (next + 1) % k;
    }
  }
  return folds;
}

std::pair<std::vector<std::int64_t>, std::vector<std::int64_t>> fold_split(const std::vector<std::int64_t>& folds, std::int64_t fold) {
  std::vector<std::int64_t> train, val;
  for (std::size_t i = 0; i < folds.size(); ++i) (folds[i] == fold ? val : train).push_back(static_cast<std::int64_t>(i));
  return {std::move(train), std::move(val)};
}

}  // namespace bellows::data
