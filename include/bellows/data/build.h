// From the config's data block to the training and validation datasets: the registered source named by
// data.source opens data.path (and data.val_path), optionally cut into sliding windows, then split into
// training and validation data (a fraction, a separate file, or a cross-validation fold).
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "bellows/config/schema.h"  // defines: Schema, Config
#include "bellows/data/dataset.h"   // defines: Dataset, DataFacts

namespace bellows::data {

class StreamBuffer;

// The data keys a run config may use: data.source (the registered names), data.path, data.val_path,
// data.val_fraction, data.val_split, data.window.*, data.cv.*, and every registered source's own keys.
void add_dataset_keys(config::Schema& schema);

// The data block's own keys, bound once in build.cpp (config/binding.h); each source's keys are bound beside the
// source (src/data/sources/), the window keys to WindowOptions.
struct DataOptions {
  std::string source = "synthetic";  // data.source: a registered source's name
  std::filesystem::path path;        // data.path ("": none)
  std::filesystem::path val_path;    // data.val_path ("": split off val_fraction)
  double val_fraction = 0.1;         // data.val_fraction
  std::string val_split = "auto";    // data.val_split: auto | tail | random
  std::int64_t cv_folds = 0;         // data.cv.folds (0: no cross-validation)
  std::int64_t cv_fold = 0;          // data.cv.fold: the held-out fold
};

// DataOptions of a validated config.
DataOptions data_options(const config::Config& config);

struct DataSplits {
  std::shared_ptr<const Dataset> train;
  std::shared_ptr<const Dataset> val;  // null when there is no validation data
  bool temporal = false;               // samples are ordered in time (windows, NetCDF)
  DataFacts facts;                     // what the source knows beyond shapes (for the model)
};

// Reads a validated config (its data.* keys); `seed` (the run's seed key, bound by app) shuffles the random split and
// deals the cross-validation folds. kConfig errors for options that do not fit the source (e.g. windows over images,
// a missing data.path); the readers' kData errors for bad files. `stream`: the buffer a program pushes samples into,
// for data.source: stream.
DataSplits build_datasets(const config::Config& config, std::uint64_t seed, std::shared_ptr<StreamBuffer> stream = nullptr);

// What the registered sources know of `dataset` (through train/validation subsets): classes, grid, vocabulary.
// Empty facts (but for the name) for datasets no source describes, e.g. sliding windows.
DataFacts facts_of(const Dataset& dataset);

// The facts of the configured source without reading its values, for a model rebuilt from a checkpoint's
// config (the graph network's grid from the NetCDF header); a validated config (data.source and data.path have
// defaults). Empty facts when the source has no such reader or needs a data.path that is empty; the reader's errors
// otherwise.
DataFacts facts_without_data(const config::Config& config);

// The arrays data.npy.extra names in a validated config (the npy source's batch tensors beyond x and y), read through
// the npy source's binding (src/data/sources/npy.cpp): what `bellows predict` asks of a checkpoint's config.
std::vector<std::string> npy_extra_arrays(const config::Config& config);

}  // namespace bellows::data
