// Cross-validation folds: every sample is held out exactly once, fold sizes differ by at most one, stratified
// folds keep each class's share within one sample, the deal is seeded, and too few samples or folds are errors.
#include "bellows/data/folds.h"

#include <ATen/ATen.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <set>
#include <vector>

#include "bellows/util/error.h"
#include "test_util.h"

namespace bellows::data {
namespace {

using ::testing::HasSubstr;
using test_support::error_from;

TEST(Folds, EverySampleIsHeldOutExactlyOnce) {
  for (const std::int64_t k : {2, 3, 5, 10}) {
    const std::int64_t n = 103;
    const auto folds = assign_folds(n, k, 7);
    ASSERT_EQ(folds.size(), static_cast<std::size_t>(n));
    std::multiset<std::int64_t> held_out;
    std::int64_t smallest = n, largest = 0;
    for (std::int64_t f = 0; f < k; ++f) {
      const auto [train, val] = fold_split(folds, f);
      EXPECT_EQ(static_cast<std::int64_t>(train.size() + val.size()), n);
      EXPECT_TRUE(std::is_sorted(val.begin(), val.end()));
      // Train and validation are disjoint.
      for (const auto i : val) EXPECT_FALSE(std::binary_search(train.begin(), train.end(), i));
      held_out.insert(val.begin(), val.end());
      smallest = std::min<std::int64_t>(smallest, static_cast<std::int64_t>(val.size()));
      largest = std::max<std::int64_t>(largest, static_cast<std::int64_t>(val.size()));
    }
    EXPECT_EQ(static_cast<std::int64_t>(held_out.size()), n) << k;
    for (std::int64_t i = 0; i < n; ++i) EXPECT_EQ(held_out.count(i), 1u) << "sample " << i << ", " << k << " folds";
    EXPECT_LE(largest - smallest, 1) << k;
  }
}

TEST(Folds, StratifiedFoldsKeepClassProportionsWithinOneSample) {
  // Imbalanced classes, interleaved: 50 of class 0, 23 of class 1, 7 of class 2.
  std::vector<std::int64_t> labels;
  for (int i = 0; i < 50; ++i) labels.push_back(0);
  for (int i = 0; i < 23; ++i) labels.push_back(1);
  for (int i = 0; i < 7; ++i) labels.push_back(2);
  std::reverse(labels.begin() + 20, labels.end());
  const at::Tensor y = at::tensor(labels, at::kLong);
  const std::int64_t k = 5, n = static_cast<std::int64_t>(labels.size());
  const auto folds = assign_folds(n, k, 3, y);
  const std::vector<std::int64_t> per_class = {50, 23, 7};
  std::vector<std::int64_t> sizes(k, 0);
  for (std::int64_t f = 0; f < k; ++f) {
    for (std::int64_t c = 0; c < 3; ++c) {
      std::int64_t count = 0;
      for (std::int64_t i = 0; i < n; ++i) count += folds[i] == f && labels[i] == c;
      EXPECT_GE(count, per_class[c] / k) << "fold " << f << " class " << c;
      EXPECT_LE(count, (per_class[c] + k - 1) / k) << "fold " << f << " class " << c;
      sizes[f] += count;
    }
  }
  EXPECT_LE(*std::max_element(sizes.begin(), sizes.end()) - *std::min_element(sizes.begin(), sizes.end()), 1);
}

TEST(Folds, TheDealIsSeeded) {
  EXPECT_EQ(assign_folds(50, 5, 1), assign_folds(50, 5, 1));
  EXPECT_NE(assign_folds(50, 5, 1), assign_folds(50, 5, 2));
  const at::Tensor y = at::arange(50, at::kLong).remainder(3);
  EXPECT_EQ(assign_folds(50, 5, 4, y), assign_folds(50, 5, 4, y));
  EXPECT_NE(assign_folds(50, 5, 4, y), assign_folds(50, 5, 5, y));
}

TEST(Folds, TooFewFoldsOrSamplesAreErrors) {
  Error e = error_from([] { assign_folds(10, 1, 0); });
  EXPECT_EQ(e.kind(), ErrorKind::kConfig);
  EXPECT_THAT(e.message(), HasSubstr("1 folds"));
  e = error_from([] { assign_folds(4, 5, 0); });
  EXPECT_EQ(e.kind(), ErrorKind::kConfig);
  EXPECT_THAT(e.message(), HasSubstr("5 folds but only 4 samples"));
  EXPECT_THAT(e.hint(), HasSubstr("at most 4 folds"));
  e = error_from([] { assign_folds(4, 2, 0, at::zeros({3}, at::kLong)); });
  EXPECT_THAT(e.message(), HasSubstr("expected [4]"));
}

}  // namespace
}  // namespace bellows::data
