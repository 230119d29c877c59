// Sliding windows over time series; see window.h. The series are kept flattened to [S*T, ...], so window w of
// series s starts at flat row s*T + w*stride and a batch is one index_select of [B, length] row indices.
#include "bellows/data/window.h"

#include <ATen/ATen.h>
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <chrono>
#include <vector>

#include "bellows/util/check.h"   // defines: BELLOWS_CHECK_*
#include "bellows/util/format.h"  // defines: shape_of
#include "bellows/util/timer.h"   // defines: seconds_since

namespace bellows::data {

namespace {

// "train.csv line 1236" and "train.csv line 1299" -> "train.csv line 1236 to line 1299": the second keeps only
// the last of the words it shares with the first.
std::string span_text(const std::string& first, const std::string& last) {
  if (first == last) return first;
  std::size_t common = 0;
  while (common < first.size() && common < last.size() && first[common] == last[common]) ++common;
  std::size_t cut = 0;
  const std::size_t space = common == 0 ? std::string::npos : first.rfind(' ', common - 1);
  if (space != std::string::npos && space > 0) {
    const std::size_t before = first.rfind(' ', space - 1);
    if (before != std::string::npos) cut = before + 1;
  }
  return fmt::format("{} to {}", first, last.substr(cut));
}

}  // namespace

WindowDataset::WindowDataset(std::map<std::string, at::Tensor> series, WindowOptions options, std::string name,
                             std::function<std::string(std::int64_t row)> describe_row)
    : options_(std::move(options)), name_(std::move(name)), describe_row_(std::move(describe_row)) {
  const WindowOptions& o = options_;
  BELLOWS_CHECK_CONFIG(o.length >= 1, fmt::format("{}: window length is {}", name_, o.length),
                       "set the window length to a positive number of rows");
  BELLOWS_CHECK_CONFIG(o.stride >= 1, fmt::format("{}: window stride is {}", name_, o.stride),
                       "set the window stride to a positive number of rows");
  BELLOWS_CHECK_CONFIG(o.horizon >= 0, fmt::format("{}: window horizon is {}", name_, o.horizon),
                       "set the horizon to the number of target rows after each window (0: no targets)");
  for (const auto& [key, t] : series) {
    BELLOWS_CHECK_DATA(key == "x" || key == "y", fmt::format("{}: unexpected series tensor '{}'", name_, key),
                       "window series hold \"x\" (inputs) and optionally \"y\" (targets)");
  }
  const auto x_it = series.find("x");
  BELLOWS_CHECK_DATA(x_it != series.end(), fmt::format("{}: no \"x\" tensor to window", name_),
                     "give the series as \"x\" [T, F] or [S, T, F]");
  at::Tensor x = x_it->second;
  BELLOWS_CHECK_DATA(x.dim() == 2 || x.dim() == 3,
                     fmt::format("{}: \"x\" has shape {}; windows need [T, F] or [S, T, F]", name_, shape_of(x)),
                     "give one series as [T, F] or S series of equal length as [S, T, F]");
  const bool batched = x.dim() == 3;
  if (!batched) x = x.unsqueeze(0);
  series_ = x.size(0);
  steps_ = x.size(1);
  BELLOWS_CHECK_DATA(series_ > 0, fmt::format("{}: \"x\" has shape {}: no series", name_, shape_of(x_it->second)),
                     "give at least one series");

  // --- the targets: "y" if given, else columns of "x" ---
  const auto y_it = series.find("y");
  at::Tensor y;
  if (y_it != series.end()) {
    BELLOWS_CHECK_CONFIG(o.horizon > 0, fmt::format("{}: horizon is 0 (no targets), but the series has \"y\"", name_),
                         "set a horizon of at least 1 to predict \"y\", or read the series without targets");
    y = y_it->second;
    const std::int64_t leading = batched ? 2 : 1;
    BELLOWS_CHECK_DATA(
        y.dim() >= leading && y.dim() <= leading + 1 && (!batched || y.size(0) == series_) &&
            y.size(leading - 1) == steps_,
        fmt::format("{}: \"y\" has shape {}, \"x\" has {}; expected {}", name_, shape_of(y), shape_of(x_it->second),
                    batched ? fmt::format("[{}, {}] or [{}, {}, K]", series_, steps_, series_, steps_)
                            : fmt::format("[{}] or [{}, K]", steps_, steps_)),
        "give \"y\" one row per row of \"x\"");
    if (!batched) y = y.unsqueeze(0);
  } else if (o.horizon > 0) {
    y = x;
  }
  if (!o.target_columns.empty()) {
    BELLOWS_CHECK_CONFIG(y.defined() && y.dim() == 3,
                         fmt::format("{}: target_columns given, but the targets have no columns{}", name_,
                                     o.horizon == 0 ? " (horizon is 0)" : ""),
                         "leave target_columns empty");
    const std::int64_t columns = y.size(2);
    for (const std::int64_t c : o.target_columns) {
      BELLOWS_CHECK_CONFIG(c >= 0 && c < columns,
                           fmt::format("{}: target column {} is out of range: the targets ({}) have {} columns", name_,
                                       c, y_it != series.end() ? "\"y\"" : "\"x\"", columns),
                           fmt::format("use target columns in [0, {})", columns));
    }
    y = y.index_select(2, at::tensor(o.target_columns, at::kLong));
  }

  const std::int64_t span = o.length + o.horizon;
  BELLOWS_CHECK_DATA(steps_ >= span,
                     fmt::format("{}: the series has {} rows, shorter than one window (length {} + horizon {} = {})",
                                 name_, steps_, o.length, o.horizon, span),
                     "shorten the window or the horizon, or use a longer series");
  windows_per_series_ = (steps_ - span) / o.stride + 1;

  auto flat = [&](const at::Tensor& t) {
    std::vector<std::int64_t> shape{series_ * steps_};
    shape.insert(shape.end(), t.sizes().begin() + 2, t.sizes().end());
    return t.contiguous().view(shape);
  };
  inputs_ = flat(x);
  if (y.defined()) targets_ = y.is_same(x) ? inputs_ : flat(y);  // the inputs as their own targets: one tensor
}

std::int64_t WindowDataset::first_row(std::int64_t index) const {
  BELLOWS_CHECK(index >= 0 && index < size(), fmt::format("{}: window {} out of range [0, {})", name_, index, size()),
                "report this bug");
  return (index / windows_per_series_) * steps_ + (index % windows_per_series_) * options_.stride;
}

Example WindowDataset::get(std::int64_t index, FetchContext& context) const {
  const auto start = std::chrono::steady_clock::now();
  const std::int64_t row = first_row(index);
  Example e;
  e.emplace("x", inputs_.narrow(0, row, options_.length).clone());
  if (targets_.defined()) e.emplace("y", targets_.narrow(0, row + options_.length, options_.horizon).clone());
  context.times.transform += seconds_since(start);
  return e;
}

namespace {

// Windows whose first flat rows are `first` (int64 [B], on the series' device): row r of window b is first[b] + r,
// a [B, length] (and [B, horizon]) index, one gather per tensor. The host's get_batch and the device's gather.
Batch gather_windows(const at::Tensor& first, const at::Tensor& inputs, const at::Tensor& targets, const WindowOptions& o) {
  const std::int64_t batch_size = first.size(0);
  const at::Tensor base = first.unsqueeze(1);
  auto gather = [&](const at::Tensor& t, std::int64_t offset, std::int64_t rows) {
    const at::Tensor index = (base + at::arange(offset, offset + rows, first.options())).view({-1});
    std::vector<std::int64_t> shape{batch_size, rows};
    shape.insert(shape.end(), t.sizes().begin() + 1, t.sizes().end());
    return t.index_select(0, index).view(shape);
  };
  Batch batch;
  batch.size = batch_size;
  batch.tensors.emplace("x", gather(inputs, 0, o.length));
  if (targets.defined()) batch.tensors.emplace("y", gather(targets, o.length, o.horizon));
  return batch;
}

// The series on a device; a window index becomes its first flat row there (WindowDataset::first_row on tensors).
class ResidentWindows final : public ResidentData {
 public:
  ResidentWindows(at::Tensor inputs, at::Tensor targets, WindowOptions options, std::int64_t steps, std::int64_t windows_per_series)
      : inputs_(std::move(inputs)), targets_(std::move(targets)), options_(std::move(options)), steps_(steps), windows_(windows_per_series) {}
  Batch gather(const at::Tensor& indices) const override {
    const at::Tensor first = indices.div(windows_, "floor") * steps_ + indices.remainder(windows_) * options_.stride;
    return gather_windows(first, inputs_, targets_, options_);
  }

 private:
  at::Tensor inputs_, targets_;
  WindowOptions options_;
  std::int64_t steps_, windows_;
};

}  // namespace

Batch WindowDataset::get_batch(std::span<const std::int64_t> indices, FetchContext& context) const {
  const auto start = std::chrono::steady_clock::now();
  std::vector<std::int64_t> first(indices.size());
  for (std::size_t b = 0; b < indices.size(); ++b) first[b] = first_row(indices[b]);
  Batch batch = gather_windows(at::tensor(first, at::kLong), inputs_, targets_, options_);
  context.times.transform += seconds_since(start);
  return batch;
}

std::int64_t WindowDataset::resident_bytes() const {
  const bool shared = targets_.defined() && targets_.is_same(inputs_);
  return static_cast<std::int64_t>(inputs_.nbytes()) + (targets_.defined() && !shared ? static_cast<std::int64_t>(targets_.nbytes()) : 0);
}

std::shared_ptr<const ResidentData> WindowDataset::place(c10::Device device) const {
  return placed_.get(device, [&] {
    const at::Tensor inputs = inputs_.to(device);
    // Targets that are the inputs themselves (no "y", every column) are placed once.
    const at::Tensor targets = !targets_.defined() ? at::Tensor() : targets_.is_same(inputs_) ? inputs : targets_.to(device);
    return std::make_shared<ResidentWindows>(inputs, targets, options_, steps_, windows_per_series_);
  });
}

std::string WindowDataset::describe(std::int64_t index) const {
  if (index < 0 || index >= size()) return fmt::format("{} window {}", name_, index);
  const std::int64_t first = first_row(index);
  const std::int64_t last = first + options_.length + options_.horizon - 1;
  if (describe_row_) return span_text(describe_row_(first), describe_row_(last));
  const std::int64_t s = first / steps_;
  const std::string rows = fmt::format("rows {} to {}", first - s * steps_, last - s * steps_);
  return series_ > 1 ? fmt::format("{} series {} {}", name_, s, rows) : fmt::format("{} {}", name_, rows);
}

std::shared_ptr<Dataset> make_window_dataset(std::map<std::string, at::Tensor> series, WindowOptions options,
                                             std::string name,
                                             std::function<std::string(std::int64_t row)> describe_row) {
  return std::make_shared<WindowDataset>(std::move(series), std::move(options), std::move(name),
                                         std::move(describe_row));
}

}  // namespace bellows::data
