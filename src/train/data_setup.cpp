// The config's data block; see data_setup.h.
#include "bellows/train/data_setup.h"

#include <ATen/ATen.h>
#include <fmt/format.h>

#include "bellows/data/stager.h"
#include "bellows/util/check.h"

namespace bellows::train {
using config::Type;

void add_data_keys(config::Schema& s) {
  auto node = [](auto v) { return YAML::Node(v); };
  const YAML::Node empty = YAML::Load("[]");
  s.add("data.source", Type::kString, "where samples come from")
      .choices({"synthetic", "csv", "npy", "netcdf", "image_folder", "text_pairs"}).default_value(node("synthetic"));
  s.add("data.path", Type::kString, "data file (csv, npy/npz, netcdf, text_pairs TSV) or folder (image_folder)").default_value(node(""));
  s.add("data.val_path", Type::kString, "separate validation data in the same format (empty: split off val_fraction)").default_value(node(""));
  s.add("data.val_fraction", Type::kDouble, "fraction held out for evaluation").min(0).max(0.9).default_value(node(0.1));
  s.add("data.val_split", Type::kString, "how val_fraction is chosen (auto: tail for time series, random otherwise)")
      .choices({"auto", "tail", "random"}).default_value(node("auto"));
  s.add("data.batch_size", Type::kInt, "samples per batch (per micro-batch)").min(1).default_value(node(32));
  s.add("data.shuffle", Type::kBool, "shuffle each epoch (seeded); sampler auto follows it").default_value(node(true));
  s.add("data.sampler", Type::kString, "sample order (auto: shuffle or sequential, after data.shuffle)")
      .choices({"auto", "sequential", "shuffle", "weighted"}).default_value(node("auto"));
  s.add("data.weights", Type::kString, "weighted sampler: balanced (inverse class frequency of the labels)")
      .choices({"balanced"}).default_value(node("balanced"));
  s.add("data.num_samples", Type::kInt, "weighted sampler: draws per epoch (0: dataset size)").min(0).default_value(node(0));
  s.add("data.drop_last", Type::kBool, "drop the last incomplete batch").default_value(node(false));
  s.add("data.workers", Type::kInt, "loading threads (0: in the training thread; -1: planned)").min(-1).default_value(node(-1));
  s.add("data.prefetch", Type::kInt, "batches loaded ahead of the training step (queue depth)").min(1).default_value(node(4));
  s.add("data.use_prefetch", Type::kBool, "load in background workers (false: synchronous, for comparison)").default_value(node(true));
  s.add("data.pin_memory", Type::kString, "pinned host batches for asynchronous device copies").choices({"auto", "true", "false"}).default_value(node("auto"));
  s.add("data.pad_value", Type::kDouble, "padding of variable-length samples").default_value(node(0.0));
  // synthetic
  s.add("data.kind", Type::kString, "synthetic: task").choices({"regression", "classification"}).default_value(node("regression"));
  s.add("data.samples", Type::kInt, "synthetic: samples").min(1).default_value(node(16384));
  s.add("data.features", Type::kInt, "synthetic: features").min(1).default_value(node(64));
  s.add("data.classes", Type::kInt, "synthetic classification: classes").min(2).default_value(node(10));
  s.add("data.noise", Type::kDouble, "synthetic regression: noise std").min(0).default_value(node(0.05));
  // csv
  s.add("data.csv.delimiter", Type::kString, "field separator: auto (tab for .tsv/.tab, else comma), ',', ';', '|' or tab")
      .choices({"auto", ",", ";", "|", "tab"}).default_value(node("auto"));
  s.add("data.csv.features", Type::kStringList, "input columns (empty: all but the targets)").default_value(empty);
  s.add("data.csv.targets", Type::kStringList, "target columns").default_value(empty);
  s.add("data.csv.categorical", Type::kStringList, "columns whose values map to a class index").default_value(empty);
  s.add("data.csv.integer", Type::kStringList, "columns parsed as integers").default_value(empty);
  s.add("data.csv.missing", Type::kString, "missing values: error, drop the row, zero, or the column mean")
      .choices({"error", "drop", "zero", "mean"}).default_value(node("error"));
  s.add("data.csv.chunk_bytes", Type::kInt, "read size").min(4096).default_value(node(4 << 20));
  // npy
  s.add("data.npy.x", Type::kString, ".npz: input array name").default_value(node("x"));
  s.add("data.npy.y", Type::kString, ".npz: target array name ('' for none); .npy: another file, or file.npz:array").default_value(node("y"));
  s.add("data.npy.mmap", Type::kBool, "memory-map arrays instead of reading them").default_value(node(true));
  // netcdf
  s.add("data.netcdf.variables", Type::kStringList, "input variables (empty: all on the time/lat/lon grid)").default_value(empty);
  s.add("data.netcdf.targets", Type::kStringList, "target variables (empty: the inputs)").default_value(empty);
  s.add("data.netcdf.horizon", Type::kInt, "targets at time t + horizon").min(0).default_value(node(1));
  s.add("data.netcdf.time_dim", Type::kString, "time dimension name").default_value(node("time"));
  s.add("data.netcdf.lat_dim", Type::kString, "latitude dimension name").default_value(node("lat"));
  s.add("data.netcdf.lon_dim", Type::kString, "longitude dimension name").default_value(node("lon"));
  s.add("data.netcdf.level_dim", Type::kString, "vertical level dimension name").default_value(node("level"));
  s.add("data.netcdf.normalize", Type::kBool, "per-variable, per-level standardisation").default_value(node(true));
  s.add("data.netcdf.stats_cache", Type::kString, "statistics cache file (empty: beside the data)").default_value(node(""));
  // images
  s.add("data.images.index", Type::kString, "CSV index (path,label) instead of class subfolders").default_value(node(""));
  s.add("data.images.channels", Type::kInt, "1 (gray) or 3 (RGB)").min(1).max(3).default_value(node(3));
  s.add("data.images.resize", Type::kIntList, "[H, W], or [S] for the shorter side (empty: none)").min(1).default_value(empty);
  s.add("data.images.crop", Type::kIntList, "[h, w] crop: random in training, center in evaluation").min(1).default_value(empty);
  s.add("data.images.random_crop", Type::kBool, "random crop in training (false: center)").default_value(node(true));
  s.add("data.images.hflip", Type::kBool, "random horizontal flip in training").default_value(node(false));
  s.add("data.images.mean", Type::kDoubleList, "per-channel mean on [0, 1] values").default_value(YAML::Load("[0.485, 0.456, 0.406]"));
  s.add("data.images.std", Type::kDoubleList, "per-channel std on [0, 1] values").min(1e-12).default_value(YAML::Load("[0.229, 0.224, 0.225]"));
  // text pairs (TSV) and their SentencePiece vocabulary
  s.add("data.text.premise", Type::kString, "text_pairs: column of the first sentence").default_value(node("premise"));
  s.add("data.text.hypothesis", Type::kString, "text_pairs: column of the second sentence").default_value(node("hypothesis"));
  s.add("data.text.label", Type::kString, "text_pairs: label column").default_value(node("label"));
  s.add("data.text.labels", Type::kStringList, "text_pairs: labels in class order (empty: the file's, sorted)").default_value(empty);
  s.add("data.text.max_len", Type::kInt, "text_pairs: tokens per sample with [CLS] and [SEP]s (longest-first truncation)").min(3).default_value(node(128));
  s.add("data.text.tokenizer", Type::kString, "text_pairs: SentencePiece .model file (empty: train one on data.path's text)").default_value(node(""));
  s.add("data.text.tokenizer_cache", Type::kString, "text_pairs: where a trained vocabulary is cached (empty: beside the data)").default_value(node(""));
  s.add("data.text.vocab_size", Type::kInt, "text_pairs: pieces of a trained vocabulary (at most)").min(8).default_value(node(8000));
  s.add("data.text.model_type", Type::kString, "text_pairs: SentencePiece algorithm of a trained vocabulary").choices({"unigram", "bpe"}).default_value(node("unigram"));
  // cross-validation (bellows cv sets these per fold)
  s.add("data.cv.folds", Type::kInt, "cross-validation folds over data.path (0: off)").min(0).default_value(node(0));
  s.add("data.cv.fold", Type::kInt, "the held-out fold, the validation split (0-based)").min(0).default_value(node(0));
  // sliding windows over csv/npy series
  s.add("data.window.length", Type::kInt, "time steps per input window (0: no windows)").min(0).default_value(node(0));
  s.add("data.window.stride", Type::kInt, "steps between window starts").min(1).default_value(node(1));
  s.add("data.window.horizon", Type::kInt, "future steps to predict (0: inputs only)").min(0).default_value(node(1));
  s.add("data.window.target_columns", Type::kIntList, "target columns of x when there is no y (empty: all)").min(0).default_value(empty);
}

data::DataSpec data_spec(const config::Config& c) {
  using namespace config;
  data::DataSpec d;
  d.source = get_string(c, "data.source");
  d.path = get_string(c, "data.path");
  d.val_path = get_string(c, "data.val_path");
  d.val_fraction = get_double(c, "data.val_fraction");
  d.val_split = get_string(c, "data.val_split");
  d.seed = static_cast<std::uint64_t>(get_int(c, "seed"));
  d.synthetic.kind = get_string(c, "data.kind");
  d.synthetic.samples = get_int(c, "data.samples");
  d.synthetic.features = get_int(c, "data.features");
  d.synthetic.classes = get_int(c, "data.classes");
  d.synthetic.noise = get_double(c, "data.noise");
  const std::string delimiter = get_string(c, "data.csv.delimiter");
  d.csv.delimiter = delimiter == "auto" ? '\0' : delimiter == "tab" ? '\t' : delimiter[0];
  d.csv.features = get_string_list(c, "data.csv.features");
  d.csv.targets = get_string_list(c, "data.csv.targets");
  d.csv.categorical = get_string_list(c, "data.csv.categorical");
  d.csv.integer = get_string_list(c, "data.csv.integer");
  d.csv.missing = get_string(c, "data.csv.missing");
  d.csv.chunk_bytes = static_cast<std::size_t>(get_int(c, "data.csv.chunk_bytes"));
  d.npy_x = get_string(c, "data.npy.x");
  d.npy_y = get_string(c, "data.npy.y");
  d.npy.mmap = get_bool(c, "data.npy.mmap");
  d.netcdf.variables = get_string_list(c, "data.netcdf.variables");
  d.netcdf.targets = get_string_list(c, "data.netcdf.targets");
  d.netcdf.horizon = get_int(c, "data.netcdf.horizon");
  d.netcdf.time_dim = get_string(c, "data.netcdf.time_dim");
  d.netcdf.lat_dim = get_string(c, "data.netcdf.lat_dim");
  d.netcdf.lon_dim = get_string(c, "data.netcdf.lon_dim");
  d.netcdf.level_dim = get_string(c, "data.netcdf.level_dim");
  d.netcdf.normalize = get_bool(c, "data.netcdf.normalize");
  d.netcdf.stats_cache = get_string(c, "data.netcdf.stats_cache");
  d.images.index = get_string(c, "data.images.index");
  d.images.channels = static_cast<int>(get_int(c, "data.images.channels"));
  d.images.resize = get_int_list(c, "data.images.resize");
  d.images.crop = get_int_list(c, "data.images.crop");
  d.images.random_crop = get_bool(c, "data.images.random_crop");
  d.images.hflip = get_bool(c, "data.images.hflip");
  d.images.mean = get_double_list(c, "data.images.mean");
  d.images.std = get_double_list(c, "data.images.std");
  // Gray images with the RGB (ImageNet) defaults: their channel average.
  if (d.images.channels == 1 && d.images.mean == std::vector<double>{0.485, 0.456, 0.406}) d.images.mean = {0.449};
  if (d.images.channels == 1 && d.images.std == std::vector<double>{0.229, 0.224, 0.225}) d.images.std = {0.226};
  d.window.length = get_int(c, "data.window.length");
  d.window.stride = get_int(c, "data.window.stride");
  d.window.horizon = get_int(c, "data.window.horizon");
  d.window.target_columns = get_int_list(c, "data.window.target_columns");
  d.text.premise_column = get_string(c, "data.text.premise");
  d.text.hypothesis_column = get_string(c, "data.text.hypothesis");
  d.text.label_column = get_string(c, "data.text.label");
  d.text.labels = get_string_list(c, "data.text.labels");
  d.text.max_len = get_int(c, "data.text.max_len");
  d.text.tokenizer = get_string(c, "data.text.tokenizer");
  d.text.tokenizer_cache = get_string(c, "data.text.tokenizer_cache");
  d.text.train.vocab_size = get_int(c, "data.text.vocab_size");
  d.text.train.model_type = get_string(c, "data.text.model_type");
  d.cv_folds = get_int(c, "data.cv.folds");
  d.cv_fold = get_int(c, "data.cv.fold");
  BELLOWS_CHECK_CONFIG(d.cv_folds != 1, fmt::format("data.cv.folds is 1 ({})", c.origin("data.cv.folds").str()),
                       "use 0 (no cross-validation) or 2 and more folds");
  return d;
}

data::LoaderOptions loader_options(const config::Config& c, const plan::Plan& p) {
  data::LoaderOptions o;
  o.batch_size = config::get_int(c, "data.batch_size");
  o.drop_last = config::get_bool(c, "data.drop_last");
  o.workers = p.workers;
  o.prefetch = config::get_int(c, "data.prefetch");
  o.use_prefetch = config::get_bool(c, "data.use_prefetch");
  o.pad_value = config::get_double(c, "data.pad_value");
  return o;
}

data::SamplerOptions sampler_options(const config::Config& c, const data::Dataset& dataset) {
  data::SamplerOptions o;
  o.seed = static_cast<std::uint64_t>(config::get_int(c, "seed"));
  const std::string kind = config::get_string(c, "data.sampler");
  o.kind = kind == "auto" ? (config::get_bool(c, "data.shuffle") ? "shuffle" : "sequential") : kind;
  if (o.kind == "weighted") {
    const at::Tensor labels = dataset.class_labels();
    BELLOWS_CHECK_CONFIG(labels.defined(),
                         fmt::format("data.sampler is weighted ({}), but {} has no class labels to balance", c.origin("data.sampler").str(), dataset.name()),
                         "weighted sampling balances classes: use integer or categorical targets, or another sampler");
    const at::Tensor counts = at::bincount(labels).to(at::kDouble);
    const at::Tensor w = (1.0 / counts).index_select(0, labels).contiguous();
    o.weights.assign(w.data_ptr<double>(), w.data_ptr<double>() + w.numel());
    o.num_samples = config::get_int(c, "data.num_samples");
  }
  return o;
}

Loaders make_loaders(const config::Config& c, const plan::Plan& p) {
  Loaders l;
  l.splits = data::build_datasets(data_spec(c));
  const data::LoaderOptions lo = loader_options(c, p);
  l.train = std::make_unique<data::Loader>(l.splits.train, data::Sampler(l.splits.train->size(), sampler_options(c, *l.splits.train)),
                                           lo, data::make_stager(p.device, p.pin_memory));
  if (l.splits.val) {
    data::LoaderOptions vo = lo;
    vo.train = false;
    vo.drop_last = false;
    data::SamplerOptions so;
    so.kind = "sequential";
    l.val = std::make_unique<data::Loader>(l.splits.val, data::Sampler(l.splits.val->size(), so), vo,
                                           data::make_stager(p.device, p.pin_memory));
  }
  return l;
}

}  // namespace bellows::train
