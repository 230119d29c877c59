// Sliding windows over time series, for the temporal models (LSTM, Transformer): sample i is `length` input rows
// and the `horizon` rows that follow them as targets. Several independent series ([S, T, F]) are windowed
// separately, so no window crosses from one series into the next. A batch is one gather, not a stack of samples.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "bellows/data/dataset.h"   // defines: Dataset, Example, FetchContext
#include "bellows/data/resident.h"  // defines: ResidentData, PlacementCache

namespace bellows::data {

struct WindowOptions {
  std::int64_t length = 0;   // input rows per window (>= 1)
  std::int64_t stride = 1;   // rows between the starts of consecutive windows (>= 1)
  std::int64_t horizon = 1;  // target rows after the inputs; 0: no targets (samples hold only "x")
  // Columns of the targets: of "y" when the series has one, else of "x". Empty: all of them.
  std::vector<std::int64_t> target_columns;
};

// Series: "x" [T, F] or [S, T, F]; optionally "y" [T], [T, K] or [S, T], [S, T, K] (same S and T as "x").
// Sample i: "x" = inputs[s : s+length] -> [length, F]; "y" = targets[s+length : s+length+horizon] -> [horizon, K]
// ([horizon] for a "y" without K). Windows start at s = 0, stride, 2*stride, ... while s + length + horizon <= T;
// index i is window i % W of series i / W, W windows per series.
class WindowDataset final : public Dataset {
 public:
  // `describe_row(r)` names row r of the series flattened to [S*T, ...] (row t of series s is s*T + t), e.g.
  // "train.csv line 1236"; empty: rows are described by number.
  WindowDataset(std::map<std::string, at::Tensor> series, WindowOptions options, std::string name,
                std::function<std::string(std::int64_t row)> describe_row = {});

  std::int64_t size() const override { return series_ * windows_per_series_; }
  Example get(std::int64_t index, FetchContext& context) const override;
  Batch get_batch(std::span<const std::int64_t> indices, FetchContext& context) const override;
  // "<name> series 2 rows 10 to 19" (inputs and targets), or via describe_row: "train.csv line 1236 to line 1299".
  std::string describe(std::int64_t index) const override;
  std::string name() const override { return name_; }
  // The series on the device (not the windows: a window's rows are gathered there as get_batch gathers them).
  std::int64_t resident_bytes() const override;
  std::shared_ptr<const ResidentData> place(c10::Device device) const override;

  std::int64_t series_count() const { return series_; }
  std::int64_t series_length() const { return steps_; }
  std::int64_t windows_per_series() const { return windows_per_series_; }

 private:
  std::int64_t first_row(std::int64_t index) const;  // flat row of the window's first input row

  WindowOptions options_;
  std::string name_;
  std::function<std::string(std::int64_t)> describe_row_;
  at::Tensor inputs_;   // [S*T, F...], contiguous
  at::Tensor targets_;  // [S*T, K...], contiguous; undefined when horizon is 0
  std::int64_t series_ = 1, steps_ = 0, windows_per_series_ = 0;
  PlacementCache placed_;
};

std::shared_ptr<Dataset> make_window_dataset(std::map<std::string, at::Tensor> series, WindowOptions options,
                                             std::string name,
                                             std::function<std::string(std::int64_t row)> describe_row = {});

}  // namespace bellows::data
