// K-fold cross-validation splits (seed 004's 5-fold CV): which fold holds each sample out, stratified by class
// when the labels are known, from a seeded shuffle, so that every sample is held out exactly once.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <utility>
#include <vector>

namespace bellows::data {

// The fold (0..k-1) of each of `n` samples. Samples are shuffled with `seed` and dealt to folds in turn; with
// `labels` (int64 [n], class indices) they are shuffled within each class and dealt class after class, the deal
// continuing where the previous class stopped, so each fold holds floor or ceil of count/k of every class and
// fold sizes differ by at most one. kConfig errors: k < 2, k > n; labels of another length.
std::vector<std::int64_t> assign_folds(std::int64_t n, std::int64_t k, std::uint64_t seed, const at::Tensor& labels = {});

// The training indices (every fold but `fold`) and the validation indices (fold `fold`), each in sample order.
std::pair<std::vector<std::int64_t>, std::vector<std::int64_t>> fold_split(const std::vector<std::int64_t>& folds, std::int64_t fold);

}  // namespace bellows::data
