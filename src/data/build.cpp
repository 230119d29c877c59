// Dataset construction from a DataSpec; see build.h.
#include "bellows/data/build.h"

#include <fmt/format.h>

#include "bellows/data/folds.h"
#include "bellows/data/subset.h"
#include "bellows/data/tensor_dataset.h"
#include "bellows/util/check.h"

namespace bellows::data {

namespace {

// The tensors of a tabular source, for windowing: "x" [T, F] and optionally "y" [T, K].
struct Series {
  std::map<std::string, at::Tensor> tensors;
  std::string name;
  std::function<std::string(std::int64_t)> describe_row;
};

std::string npy_array_spec(const std::filesystem::path& path, const std::string& name) {
  return path.extension() == ".npz" ? fmt::format("{}:{}", path.string(), name) : name;
}

std::map<std::string, std::string> npy_arrays(const DataSpec& spec, const std::filesystem::path& path) {
  std::map<std::string, std::string> arrays;
  if (path.extension() == ".npz") {
    BELLOWS_CHECK_CONFIG(!spec.npy_x.empty(), "data.npy.x is empty", "name the input array of the .npz file");
    arrays.emplace("x", npy_array_spec(path, spec.npy_x));
    if (!spec.npy_y.empty()) arrays.emplace("y", npy_array_spec(path, spec.npy_y));
  } else {
    arrays.emplace("x", path.string());
    // With a single .npy file, y must name another file; the default "y" (an array name) means "none".
    if (!spec.npy_y.empty() && spec.npy_y != "y") arrays.emplace("y", spec.npy_y);
  }
  return arrays;
}

Series read_series(const DataSpec& spec, const std::filesystem::path& path) {
  Series s;
  if (spec.source == "csv") {
    CsvOptions o = spec.csv;
    o.path = path;
    CsvTable table = read_csv(o);
    s.tensors = std::move(table.tensors);
    s.name = fmt::format("csv {}", path.string());
    s.describe_row = [lines = std::move(table.lines), p = path.string()](std::int64_t row) {
      return fmt::format("{} line {}", p, lines.at(static_cast<std::size_t>(row)));
    };
    return s;
  }
  BELLOWS_CHECK_CONFIG(spec.source == "npy", fmt::format("sliding windows need a csv or npy source, not {}", spec.source),
                       "set data.window.length: 0, or read the series from CSV or NumPy files");
  for (const auto& [name, array] : npy_arrays(spec, path)) {
    const auto colon = array.rfind(".npz:");
    at::Tensor t = colon == std::string::npos ? read_npy(array, spec.npy)
                                              : read_npz_array(array.substr(0, colon + 4), array.substr(colon + 5), spec.npy);
    if (at::isFloatingType(t.scalar_type()) && t.scalar_type() != at::kFloat) t = t.to(at::kFloat);
    s.tensors.emplace(name, t);
  }
  s.name = fmt::format("npy {}", path.string());
  s.describe_row = [p = path.string()](std::int64_t row) { return fmt::format("{} row {}", p, row); };
  return s;
}

std::shared_ptr<const Dataset> open(const DataSpec& spec, const std::filesystem::path& path) {
  if (spec.window.length > 0) {
    Series s = read_series(spec, path);
    return make_window_dataset(std::move(s.tensors), spec.window, s.name, s.describe_row);
  }
  if (spec.source == "csv") {
    CsvOptions o = spec.csv;
    o.path = path;
    return make_csv_dataset(o);
  }
  if (spec.source == "npy") return make_npy_dataset(npy_arrays(spec, path), spec.npy);
  if (spec.source == "netcdf") {
    NetcdfOptions o = spec.netcdf;
    o.path = path;
    return make_netcdf_dataset(o);
  }
  if (spec.source == "image_folder") {
    ImageFolderOptions o = spec.images;
    o.root = path;
    return make_image_folder_dataset(o);
  }
  if (spec.source == "text_pairs") {
    TextPairsOptions o = spec.text;
    o.path = path;
    return std::make_shared<TextPairsDataset>(o);
  }
  BELLOWS_FAIL(ErrorKind::kConfig, fmt::format("data source '{}' is not known", spec.source),
               "use synthetic, csv, npy, netcdf, image_folder or text_pairs");
}

// Cross-validation: fold spec.cv_fold of `all` validates, the other folds train.
DataSplits fold_splits(const DataSpec& spec, std::shared_ptr<const Dataset> all, bool temporal) {
  BELLOWS_CHECK_CONFIG(spec.val_path.empty(), "data.cv.folds is set together with data.val_path",
                       "cross-validation holds out each fold of data.path in turn: drop data.val_path");
  BELLOWS_CHECK_CONFIG(spec.cv_fold >= 0 && spec.cv_fold < spec.cv_folds,
                       fmt::format("data.cv.fold is {}, outside [0, {}) for {} folds", spec.cv_fold, spec.cv_folds, spec.cv_folds),
                       "folds are numbered from 0");
  const auto folds = assign_folds(all->size(), spec.cv_folds, spec.seed, all->class_labels());
  auto [train, val] = fold_split(folds, spec.cv_fold);
  DataSplits out;
  out.temporal = temporal;
  out.train = std::make_shared<SubsetDataset>(all, std::move(train), fmt::format("train (fold {} of {} held out)", spec.cv_fold, spec.cv_folds));
  out.val = std::make_shared<SubsetDataset>(all, std::move(val), fmt::format("validation (fold {} of {})", spec.cv_fold, spec.cv_folds));
  return out;
}

}  // namespace

DataSplits build_datasets(const DataSpec& spec) {
  DataSplits out;
  if (spec.source == "synthetic") {
    BELLOWS_CHECK_CONFIG(spec.window.length == 0, "sliding windows over synthetic data", "set data.window.length: 0");
    BELLOWS_CHECK_CONFIG(spec.val_path.empty(), "data.val_path is set for synthetic data", "synthetic data splits off data.val_fraction");
    SyntheticOptions o = spec.synthetic;
    o.seed = spec.seed;
    TensorDatasetOptions to;
    to.name = fmt::format("synthetic {} ({} samples, {} features)", o.kind, o.samples, o.features);
    auto all = std::make_shared<TensorDataset>(make_synthetic(o), to);
    if (spec.cv_folds > 0) return fold_splits(spec, all, false);
    auto [train, val] = split_indices(all->size(), spec.val_fraction, "tail", spec.seed);
    out.train = std::make_shared<SubsetDataset>(all, std::move(train), "train");
    if (!val.empty()) out.val = std::make_shared<SubsetDataset>(all, std::move(val), "validation");
    return out;
  }
  BELLOWS_CHECK_CONFIG(!spec.path.empty(), fmt::format("data.source is {} but data.path is empty", spec.source),
                       spec.source == "image_folder" ? "set data.path to the image folder" : "set data.path to the data file");
  BELLOWS_CHECK_CONFIG(spec.source == "csv" || spec.source == "npy" || spec.window.length == 0,
                       fmt::format("sliding windows need a csv or npy source, not {}", spec.source),
                       "set data.window.length: 0, or read the series from CSV or NumPy files");
  out.temporal = spec.window.length > 0 || spec.source == "netcdf";
  std::shared_ptr<const Dataset> all = open(spec, spec.path);
  if (spec.cv_folds > 0) return fold_splits(spec, all, out.temporal);
  if (!spec.val_path.empty()) {
    out.train = all;
    DataSpec val_spec = spec;
    // A validation folder numbers its classes as training does, even when it lacks one of them.
    if (const auto* images = dynamic_cast<const ImageFolderDataset*>(all.get())) val_spec.images.classes = images->classes();
    // Validation text uses the training vocabulary and label order.
    if (const auto* text = dynamic_cast<const TextPairsDataset*>(all.get())) {
      val_spec.text.vocabulary = text->shared_tokenizer();
      val_spec.text.tokenizer = text->tokenizer_path();
      val_spec.text.labels = text->label_names();
    }
    out.val = open(val_spec, spec.val_path);
    return out;
  }
  const std::string mode = spec.val_split == "auto" ? (out.temporal ? "tail" : "random") : spec.val_split;
  auto [train, val] = split_indices(all->size(), spec.val_fraction, mode, spec.seed);
  if (val.empty()) {
    out.train = all;
    return out;
  }
  out.train = std::make_shared<SubsetDataset>(all, std::move(train), "train");
  out.val = std::make_shared<SubsetDataset>(all, std::move(val), "validation");
  return out;
}

}  // namespace bellows::data
