// Tensor datasets, subsets and splits, and collation with padding.
#include <ATen/ATen.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>

#include "bellows/data/collate.h"
#include "bellows/data/subset.h"
#include "bellows/data/tensor_dataset.h"
#include "bellows/util/error.h"

namespace bellows::data {
namespace {

using ::testing::HasSubstr;

TEST(TensorDataset, BatchIsAGatherAndMatchesSamples) {
  auto x = at::arange(20, at::kFloat).reshape({10, 2});
  TensorDataset d({{"x", x}, {"y", at::arange(10, at::kLong)}}, {.name = "t", .describe = {}, .float_dtype = std::nullopt});
  FetchContext ctx;
  const std::vector<std::int64_t> idx{7, 2};
  const Batch b = d.get_batch(idx, ctx);
  EXPECT_EQ(b.size, 2);
  EXPECT_TRUE(b.at("x").equal(at::stack({d.get(7, ctx).at("x"), d.get(2, ctx).at("x")})));
  EXPECT_EQ(b.at("y")[0].item<std::int64_t>(), 7);
  EXPECT_TRUE(d.class_labels().equal(at::arange(10, at::kLong)));
  EXPECT_EQ(d.describe(3), "t sample 3");
}

TEST(TensorDataset, CastsFloat64PerBatch) {
  TensorDataset d({{"x", at::ones({4, 2}, at::kDouble)}}, {.name = "t", .describe = {}, .float_dtype = at::kFloat});
  FetchContext ctx;
  const std::vector<std::int64_t> idx{0, 1};
  EXPECT_EQ(d.get_batch(idx, ctx).at("x").scalar_type(), at::kFloat);
}

TEST(TensorDataset, MismatchedLengthsNameTheTensor) {
  try {
    TensorDataset d({{"x", at::ones({4, 2})}, {"y", at::ones({3})}}, {.name = "pairs.npz"});
    ADD_FAILURE();
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kData);
    EXPECT_THAT(e.message(), HasSubstr("pairs.npz: tensor 'y' has 3 samples, but 'x' has 4"));
  }
}

TEST(Split, TailKeepsOrderRandomIsSeededAndDisjoint) {
  auto [train, val] = split_indices(10, 0.3, "tail", 0);
  EXPECT_EQ(train, (std::vector<std::int64_t>{0, 1, 2, 3, 4, 5, 6}));
  EXPECT_EQ(val, (std::vector<std::int64_t>{7, 8, 9}));
  auto [rt, rv] = split_indices(100, 0.2, "random", 5);
  EXPECT_EQ(rv.size(), 20u);
  EXPECT_EQ(rv, split_indices(100, 0.2, "random", 5).second);
  EXPECT_NE(rv, split_indices(100, 0.2, "random", 6).second);
  std::vector<std::int64_t> all = rt;
  all.insert(all.end(), rv.begin(), rv.end());
  std::sort(all.begin(), all.end());
  for (std::int64_t i = 0; i < 100; ++i) EXPECT_EQ(all[static_cast<std::size_t>(i)], i);
}

TEST(Subset, MapsIndicesLabelsAndDescriptions) {
  auto base = std::make_shared<TensorDataset>(std::map<std::string, at::Tensor>{{"y", at::arange(10, at::kLong) * 10}},
                                              TensorDatasetOptions{.name = "base"});
  SubsetDataset s(base, {9, 4}, "validation");
  FetchContext ctx;
  const std::vector<std::int64_t> idx{1, 0};
  const Batch b = s.get_batch(idx, ctx);
  EXPECT_EQ(b.at("y")[0].item<std::int64_t>(), 40);
  EXPECT_EQ(b.at("y")[1].item<std::int64_t>(), 90);
  EXPECT_TRUE(s.class_labels().equal(at::tensor({90, 40}, at::kLong)));
  EXPECT_EQ(s.describe(0), "base sample 9");
  EXPECT_THROW(SubsetDataset(base, {10}, "bad"), Error);
}

TEST(Collate, PadsVariableLengthSequencesWithMasks) {
  std::vector<Example> ex{{{"tokens", at::tensor({1, 2, 3}, at::kLong)}, {"y", at::scalar_tensor(0, at::kLong)}},
                          {{"tokens", at::tensor({4}, at::kLong)}, {"y", at::scalar_tensor(1, at::kLong)}}};
  const Batch b = collate(ex, {.pad_value = -1});
  EXPECT_TRUE(b.at("tokens").equal(at::tensor({1, 2, 3, 4, -1, -1}, at::kLong).reshape({2, 3})));
  EXPECT_TRUE(b.at("tokens_mask").equal(at::tensor({1, 1, 1, 1, 0, 0}, at::kLong).to(at::kBool).reshape({2, 3})));
  EXPECT_TRUE(b.at("tokens_lengths").equal(at::tensor({3, 1}, at::kLong)));
  EXPECT_EQ(b.tensors.count("y_mask"), 0u);  // equal shapes are stacked, not padded
}

TEST(Collate, ShapeMismatchOutsideTheFirstDimensionIsAnError) {
  std::vector<Example> ex{{{"img", at::zeros({3, 8, 8})}}, {{"img", at::zeros({3, 8, 9})}}};
  try {
    collate(ex, {}, [](std::size_t i) { return "cats/" + std::to_string(i) + ".png"; });
    ADD_FAILURE();
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kData);
    EXPECT_THAT(e.message(), HasSubstr("tensor 'img' of cats/1.png has shape [3, 8, 9], but cats/0.png has [3, 8, 8]"));
  }
}

}  // namespace
}  // namespace bellows::data
