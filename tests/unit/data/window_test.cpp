// Sliding windows: how many there are, what each holds (inputs, then the horizon as targets), strides, series that
// windows never cross, target columns, the one-gather batch against stacked samples, describe(), and config errors.
#include "bellows/data/window.h"

#include <ATen/ATen.h>
#include <fmt/format.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <functional>
#include <string>
#include <vector>

#include "bellows/util/error.h"
#include "test_util.h"

namespace bellows::data {
namespace {

using test_support::error_from;
using test_support::floats;

using ::testing::HasSubstr;
using Sizes = std::vector<std::int64_t>;



// Row t of a [T, F] series holds 10*t + f in column f, so every value names its row and column.
at::Tensor series(std::int64_t steps, std::int64_t features) {
  return (at::arange(steps, at::kFloat).unsqueeze(1) * 10 + at::arange(features, at::kFloat)).contiguous();
}

WindowOptions window(std::int64_t length, std::int64_t horizon, std::int64_t stride = 1) {
  WindowOptions o;
  o.length = length;
  o.horizon = horizon;
  o.stride = stride;
  return o;
}

TEST(WindowDataset, CountsAndFirstAndLastWindow) {
  WindowDataset d({{"x", series(10, 2)}}, window(3, 2), "w");
  EXPECT_EQ(d.size(), 6);  // starts 0..5: 5 + 3 + 2 = 10
  FetchContext context;
  const Example first = d.get(0, context);
  EXPECT_EQ(first.at("x").sizes().vec(), (Sizes{3, 2}));
  EXPECT_EQ(floats(first.at("x")), (std::vector<float>{0, 1, 10, 11, 20, 21}));
  EXPECT_EQ(first.at("y").sizes().vec(), (Sizes{2, 2}));
  EXPECT_EQ(floats(first.at("y")), (std::vector<float>{30, 31, 40, 41}));
  const Example last = d.get(5, context);
  EXPECT_EQ(floats(last.at("x")), (std::vector<float>{50, 51, 60, 61, 70, 71}));
  EXPECT_EQ(floats(last.at("y")), (std::vector<float>{80, 81, 90, 91}));
}

TEST(WindowDataset, Stride) {
  WindowDataset d({{"x", series(10, 1)}}, window(3, 1, 3), "w");
  ASSERT_EQ(d.size(), 3);  // starts 0, 3, 6; a start at 9 would need rows up to 12
  FetchContext context;
  for (std::int64_t i = 0; i < 3; ++i) {
    const float s = static_cast<float>(30 * i);
    EXPECT_EQ(floats(d.get(i, context).at("x")), (std::vector<float>{s, s + 10, s + 20})) << i;
    EXPECT_EQ(floats(d.get(i, context).at("y")), (std::vector<float>{s + 30})) << i;
  }
  WindowDataset uneven({{"x", series(11, 1)}}, window(3, 1, 3), "w");
  EXPECT_EQ(uneven.size(), 3);  // start 9 still does not fit: 9 + 4 > 11
}

TEST(WindowDataset, WindowsNeverCrossSeriesBoundaries) {
  // Series s holds 100*s + t at step t.
  const at::Tensor x =
      (at::arange(3, at::kFloat).view({3, 1, 1}) * 100 + at::arange(6, at::kFloat).view({1, 6, 1})).contiguous();
  WindowDataset d({{"x", x}}, window(2, 1, 2), "w");
  EXPECT_EQ(d.series_count(), 3);
  EXPECT_EQ(d.windows_per_series(), 2);  // starts 0 and 2; start 4 would need step 6
  ASSERT_EQ(d.size(), 6);
  FetchContext context;
  EXPECT_EQ(floats(d.get(1, context).at("x")), (std::vector<float>{2, 3}));
  EXPECT_EQ(floats(d.get(1, context).at("y")), (std::vector<float>{4}));
  EXPECT_EQ(floats(d.get(2, context).at("x")), (std::vector<float>{100, 101}));
  EXPECT_EQ(floats(d.get(2, context).at("y")), (std::vector<float>{102}));
  for (std::int64_t i = 0; i < d.size(); ++i) {
    const Example e = d.get(i, context);
    const float series_base = 100.0f * static_cast<float>(i / 2);
    for (const float v : floats(e.at("x"))) EXPECT_EQ(std::floor(v / 100) * 100, series_base) << i;
    for (const float v : floats(e.at("y"))) EXPECT_EQ(std::floor(v / 100) * 100, series_base) << i;
  }
}

TEST(WindowDataset, TargetColumnsOfX) {
  WindowOptions o = window(2, 2);
  o.target_columns = {2, 0};
  WindowDataset d({{"x", series(6, 3)}}, o, "w");
  FetchContext context;
  const Example e = d.get(1, context);
  EXPECT_EQ(e.at("x").sizes().vec(), (Sizes{2, 3}));
  EXPECT_EQ(e.at("y").sizes().vec(), (Sizes{2, 2}));
  EXPECT_EQ(floats(e.at("y")), (std::vector<float>{32, 30, 42, 40}));
}

TEST(WindowDataset, TargetsFromY) {
  const at::Tensor y = series(8, 2) + 1000;
  WindowDataset d({{"x", series(8, 3)}, {"y", y}}, window(3, 1), "w");
  FetchContext context;
  EXPECT_EQ(floats(d.get(4, context).at("y")), (std::vector<float>{1070, 1071}));
  WindowOptions o = window(3, 2);
  o.target_columns = {1};
  WindowDataset picked({{"x", series(8, 3)}, {"y", y}}, o, "w");
  EXPECT_EQ(floats(picked.get(0, context).at("y")), (std::vector<float>{1031, 1041}));
  // Class labels per step (an int64 "y" [T], as read_csv gives): targets are [horizon].
  WindowDataset labels({{"x", series(8, 3)}, {"y", at::arange(8, at::kLong) * 2}}, window(3, 2), "w");
  const at::Tensor label = labels.get(1, context).at("y");
  EXPECT_EQ(label.scalar_type(), at::kLong);
  EXPECT_EQ(label.sizes().vec(), (Sizes{2}));
  EXPECT_EQ(label[0].item<std::int64_t>(), 8);
  EXPECT_EQ(label[1].item<std::int64_t>(), 10);
}

TEST(WindowDataset, HorizonZeroHasNoTargets) {
  WindowDataset d({{"x", series(5, 2)}}, window(3, 0), "w");
  EXPECT_EQ(d.size(), 3);
  FetchContext context;
  EXPECT_EQ(d.get(2, context).count("y"), 0u);
  EXPECT_EQ(floats(d.get(2, context).at("x")), (std::vector<float>{20, 21, 30, 31, 40, 41}));
  const std::vector<std::int64_t> indices = {0, 2};
  const Batch b = d.get_batch(indices, context);
  EXPECT_EQ(b.tensors.count("y"), 0u);
  EXPECT_EQ(b.at("x").sizes().vec(), (Sizes{2, 3, 2}));
}

TEST(WindowDataset, GetBatchEqualsStackedSamples) {
  const at::Tensor x =
      (at::arange(2, at::kFloat).view({2, 1, 1}) * 1000 + series(12, 3).unsqueeze(0)).contiguous();  // [2, 12, 3]
  WindowOptions o = window(4, 2, 3);
  o.target_columns = {1, 2};
  WindowDataset d({{"x", x}}, o, "w");
  ASSERT_EQ(d.size(), 6);  // per series: starts 0, 3, 6
  const std::vector<std::int64_t> indices = {5, 0, 3, 3, 2};
  FetchContext context;
  const Batch batch = d.get_batch(indices, context);
  EXPECT_GT(context.times.transform, 0.0);
  EXPECT_EQ(batch.size, 5);
  std::vector<at::Tensor> xs, ys;
  for (const std::int64_t i : indices) {
    Example e = d.get(i, context);
    xs.push_back(e.at("x"));
    ys.push_back(e.at("y"));
  }
  EXPECT_EQ(batch.at("x").sizes().vec(), (Sizes{5, 4, 3}));
  EXPECT_EQ(batch.at("y").sizes().vec(), (Sizes{5, 2, 2}));
  EXPECT_TRUE(at::equal(batch.at("x"), at::stack(xs)));
  EXPECT_TRUE(at::equal(batch.at("y"), at::stack(ys)));
  // Window 5 is series 1 starting at step 6: its first input is 1000 + 60.
  EXPECT_EQ(batch.at("x")[0][0][0].item<float>(), 1060);
}

TEST(WindowDataset, Describe) {
  WindowDataset one({{"x", series(10, 1)}}, window(3, 2, 2), "sine");
  EXPECT_EQ(one.name(), "sine");
  EXPECT_EQ(one.describe(1), "sine rows 2 to 6");
  WindowDataset many({{"x", series(10, 1).view({2, 5, 1})}}, window(2, 1), "pairs");
  EXPECT_EQ(many.describe(4), "pairs series 1 rows 1 to 3");
  // Rows named by the CSV reader's lines (here: line = row + 2, after the header).
  WindowDataset csv({{"x", at::zeros({1400, 1})}}, window(60, 4), "csv train.csv",
                    [](std::int64_t row) { return fmt::format("train.csv line {}", row + 2); });
  EXPECT_EQ(csv.describe(1234), "train.csv line 1236 to line 1299");
}

TEST(WindowDataset, MakeWindowDatasetIsADataset) {
  const std::shared_ptr<Dataset> d = make_window_dataset({{"x", series(7, 2)}}, window(2, 1), "w");
  EXPECT_EQ(d->size(), 5);
  EXPECT_EQ(d->name(), "w");
}

TEST(WindowDataset, BadOptionsNameTheValues) {
  auto error = [](std::map<std::string, at::Tensor> s, WindowOptions o) {
    return error_from([&] { WindowDataset d(std::move(s), std::move(o), "w"); });
  };
  Error e = error({{"x", series(10, 3)}}, window(0, 1));
  EXPECT_EQ(e.kind(), ErrorKind::kConfig);
  EXPECT_THAT(e.message(), HasSubstr("w: window length is 0"));
  e = error({{"x", series(10, 3)}}, window(2, 1, 0));
  EXPECT_EQ(e.kind(), ErrorKind::kConfig);
  EXPECT_THAT(e.message(), HasSubstr("w: window stride is 0"));
  e = error({{"x", series(10, 3)}}, window(2, -1));
  EXPECT_EQ(e.kind(), ErrorKind::kConfig);
  EXPECT_THAT(e.message(), HasSubstr("w: window horizon is -1"));
  e = error({{"x", series(4, 3)}}, window(3, 2));
  EXPECT_EQ(e.kind(), ErrorKind::kData);
  EXPECT_THAT(e.message(), HasSubstr("w: the series has 4 rows, shorter than one window (length 3 + horizon 2 = 5)"));
  WindowOptions columns = window(2, 1);
  columns.target_columns = {0, 3};
  e = error({{"x", series(10, 3)}}, columns);
  EXPECT_EQ(e.kind(), ErrorKind::kConfig);
  EXPECT_THAT(e.message(), HasSubstr("w: target column 3 is out of range: the targets (\"x\") have 3 columns"));
  e = error({{"x", series(10, 3)}, {"y", at::zeros({9, 1})}}, window(2, 1));
  EXPECT_EQ(e.kind(), ErrorKind::kData);
  EXPECT_THAT(e.message(), HasSubstr("w: \"y\" has shape [9, 1], \"x\" has [10, 3]; expected [10] or [10, K]"));
  e = error({{"x", series(10, 3)}, {"y", at::zeros({10, 1})}}, window(2, 0));
  EXPECT_EQ(e.kind(), ErrorKind::kConfig);
  EXPECT_THAT(e.message(), HasSubstr("horizon is 0 (no targets), but the series has \"y\""));
  e = error({{"x", at::zeros({0, 5, 1})}}, window(2, 1));
  EXPECT_EQ(e.kind(), ErrorKind::kData);
  EXPECT_THAT(e.message(), HasSubstr("w: \"x\" has shape [0, 5, 1]: no series"));
  e = error({{"x", at::zeros({10})}}, window(2, 1));
  EXPECT_EQ(e.kind(), ErrorKind::kData);
  EXPECT_THAT(e.message(), HasSubstr("w: \"x\" has shape [10]; windows need [T, F] or [S, T, F]"));
}

}  // namespace
}  // namespace bellows::data
