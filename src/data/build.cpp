// Dataset construction from the config's data block; see build.h. The sources themselves live in
// src/data/sources/, one file each, found through the source registry.
#include "bellows/data/build.h"

#include <fmt/format.h>

#include "bellows/config/binding.h"  // defines: Binding
#include "bellows/config/paths.h"    // defines: check_path_exists
#include "bellows/data/folds.h"
#include "bellows/data/source_registry.h"
#include "bellows/data/subset.h"
#include "bellows/data/window.h"
#include "bellows/util/check.h"

namespace bellows::data {

namespace {

// The data block's own keys, bound once to DataOptions (config/binding.h); data.source's choices are the registered
// sources' names.
const config::Binding<DataOptions>& data_binding() {
  using O = DataOptions;
  return config::bound<O>("data.", [](config::Binding<O>& b) {
    std::vector<std::string> names;
    for (const auto& e : source_registry()) names.push_back(e.name);
    b.key("source", &O::source, "where samples come from").choices(names);
    b.key("path", &O::path, "data file (csv, npy/npz, netcdf, text_pairs TSV) or folder (image_folder); relative to the config file")
        .file_path();
    b.key("val_path", &O::val_path,
          "separate validation data in the same format (empty: split off val_fraction); relative to the config file")
        .file_path();
    b.key("val_fraction", &O::val_fraction, "fraction held out for evaluation").min(0).max(0.9);
    b.key("val_split", &O::val_split, "how val_fraction is chosen (auto: tail for time series, random otherwise)")
        .choices({"auto", "tail", "random"});
    // cross-validation (bellows cv sets these per fold)
    b.key("cv.folds", &O::cv_folds, "cross-validation folds over data.path (0: off)").min(0);
    b.key("cv.fold", &O::cv_fold, "the held-out fold, the validation split (0-based)").min(0);
  });
}

// Sliding windows over csv/npy series: the data.window.* keys of WindowOptions, bound once (config/binding.h).
const config::Binding<WindowOptions>& window_binding() {
  using O = WindowOptions;
  return config::bound<O>("data.window.", [](config::Binding<O>& b) {
    b.key("length", &O::length, "time steps per input window (0: no windows)").min(0);
    b.key("stride", &O::stride, "steps between window starts").min(1);
    b.key("horizon", &O::horizon, "future steps to predict (0: inputs only)").min(0);
    b.key("target_columns", &O::target_columns, "target columns of x when there is no y (empty: all)").min(0);
  });
}

std::shared_ptr<const Dataset> open(const SourceEntry& source, const SourceRequest& request) {
  const WindowOptions window = window_binding().read(*request.config);
  if (window.length == 0) return source.open(request);
  Series s = source.read_series(request);
  return make_window_dataset(std::move(s.tensors), window, s.name, s.describe_row);
}

// Cross-validation: fold data.cv.fold of `all` validates, the other folds train.
DataSplits fold_splits(const config::Config& c, const DataOptions& d, std::uint64_t seed, std::shared_ptr<const Dataset> all,
                       DataSplits out) {
  const std::int64_t folds = d.cv_folds, fold = d.cv_fold;
  BELLOWS_CHECK_CONFIG(d.val_path.empty(), "data.cv.folds is set together with data.val_path",
                       "cross-validation holds out each fold of data.path in turn: drop data.val_path");
  BELLOWS_CHECK_CONFIG(fold >= 0 && fold < folds,
                       fmt::format("data.cv.fold is {}, outside [0, {}) for {} folds ({})", fold, folds, folds, c.origin("data.cv.fold").str()),
                       "folds are numbered from 0");
  const auto assigned = assign_folds(all->size(), folds, seed, all->class_labels());
  auto [train, val] = fold_split(assigned, fold);
  out.train = std::make_shared<SubsetDataset>(all, std::move(train), fmt::format("train (fold {} of {} held out)", fold, folds));
  out.val = std::make_shared<SubsetDataset>(all, std::move(val), fmt::format("validation (fold {} of {})", fold, folds));
  return out;
}

}  // namespace

DataOptions data_options(const config::Config& c) { return data_binding().read(c); }

// The data block's keys, the window keys (WindowOptions) and each source's own keys (src/data/sources/).
void add_dataset_keys(config::Schema& s) {
  data_binding().declare(s);
  window_binding().declare(s);
  for (const auto& e : source_registry()) {
    if (e.add_keys) e.add_keys(s);
  }
}

DataSplits build_datasets(const config::Config& c, std::uint64_t seed, std::shared_ptr<StreamBuffer> stream) {
  const DataOptions d = data_options(c);
  const std::string& name = d.source;
  const SourceEntry& source = find_source(name);
  const std::int64_t cv_folds = d.cv_folds;
  BELLOWS_CHECK_CONFIG(cv_folds != 1, fmt::format("data.cv.folds is 1 ({})", c.origin("data.cv.folds").str()),
                       "use 0 (no cross-validation) or 2 and more folds");
  SourceRequest request;
  request.config = &c;
  request.path = d.path;
  request.seed = seed;
  request.stream = std::move(stream);
  const std::filesystem::path& val_path = d.val_path;
  const bool windows = window_binding().read(c).length > 0;
  BELLOWS_CHECK_CONFIG(!windows || source.read_series,
                       fmt::format("sliding windows need a csv or npy source, not {}", name),
                       "set data.window.length: 0, or read the series from CSV or NumPy files");
  BELLOWS_CHECK_CONFIG(!source.needs_path || !request.path.empty(), fmt::format("data.source is {} but data.path is empty", name),
                       source.path_hint);
  BELLOWS_CHECK_CONFIG(source.has_val_path || val_path.empty(), fmt::format("data.val_path is set for {} data", name),
                       fmt::format("{} data splits off data.val_fraction", name));

  // Named here, where the key and where it was set are known; a reader's own error knows only the path.
  if (source.needs_path) config::check_path_exists(c, "data.path", request.path, ErrorKind::kData, source.path_hint);
  if (!val_path.empty()) {
    config::check_path_exists(c, "data.val_path", val_path, ErrorKind::kData,
                              "give validation data in data.path's format");
  }

  DataSplits out;
  out.temporal = windows || source.temporal;
  std::shared_ptr<const Dataset> all = open(source, request);
  out.facts = facts_of(*all);
  if (cv_folds > 0) return fold_splits(c, d, seed, all, std::move(out));
  if (!val_path.empty()) {
    out.train = all;
    SourceRequest val = request;
    val.path = val_path;
    val.like = all.get();  // the same class numbering and vocabulary as the training data
    out.val = open(source, val);
    return out;
  }
  const std::string& split = d.val_split;
  const std::string automatic = !source.auto_split.empty() ? source.auto_split : out.temporal ? "tail" : "random";
  const std::string mode = split == "auto" ? automatic : split;
  auto [train, val] = split_indices(all->size(), d.val_fraction, mode, request.seed);
  if (val.empty()) {
    out.train = all;
    return out;
  }
  out.train = std::make_shared<SubsetDataset>(all, std::move(train), "train");
  out.val = std::make_shared<SubsetDataset>(all, std::move(val), "validation");
  return out;
}

DataFacts facts_of(const Dataset& dataset) {
  const Dataset* d = &dataset;
  while (const auto* subset = dynamic_cast<const SubsetDataset*>(d)) d = &subset->base();
  for (const auto& source : source_registry()) {
    if (!source.facts) continue;
    DataFacts f = source.facts(*d);
    if (f.classes || f.grid || f.text || !f.categories.empty()) {
      f.source = d->name();
      return f;
    }
  }
  DataFacts none;
  none.source = d->name();
  return none;
}

// A validated config always has data.source and data.path (both have defaults): every caller validates it first (the
// run, `bellows predict` with a checkpoint's config).
DataFacts facts_without_data(const config::Config& c) {
  const DataOptions d = data_options(c);
  const SourceEntry& source = find_source(d.source);
  SourceRequest request;
  request.config = &c;
  request.path = d.path;
  if (!source.facts_without_data || (source.needs_path && request.path.empty())) return {};
  return source.facts_without_data(request);
}

}  // namespace bellows::data
