// From the config's data block to the training and validation datasets: the registered source named by
// data.source opens data.path (and data.val_path), optionally cut into sliding windows, then split into
// training and validation data (a fraction, a separate file, or a cross-validation fold).
#pragma once

#include <memory>

#include "bellows/config/schema.h"  // defines: Schema, Config
#include "bellows/data/dataset.h"   // defines: Dataset, DataFacts

namespace bellows::data {

class StreamBuffer;

// The data keys a run config may use: data.source (the registered names), data.path, data.val_path,
// data.val_fraction, data.val_split, data.window.*, data.cv.*, and every registered source's own keys.
void add_dataset_keys(config::Schema& schema);

struct DataSplits {
  std::shared_ptr<const Dataset> train;
  std::shared_ptr<const Dataset> val;  // null when there is no validation data
  bool temporal = false;               // samples are ordered in time (windows, NetCDF)
  DataFacts facts;                     // what the source knows beyond shapes (for the model)
};

// Reads a validated config (its data.* keys and seed). kConfig errors for options that do not fit the source
// (e.g. windows over images, a missing data.path); the readers' kData errors for bad files. `stream`: the
// buffer a program pushes samples into, for data.source: stream.
DataSplits build_datasets(const config::Config& config, std::shared_ptr<StreamBuffer> stream = nullptr);

// What the registered sources know of `dataset` (through train/validation subsets): classes, grid, vocabulary.
// Empty facts (but for the name) for datasets no source describes, e.g. sliding windows.
DataFacts facts_of(const Dataset& dataset);

// The facts of the configured source without reading its values, for a model rebuilt from a checkpoint's
// config (the graph network's grid from the NetCDF header). Empty facts when the source has no such reader or
// data.path is unset; the reader's errors otherwise.
DataFacts facts_without_data(const config::Config& config);

}  // namespace bellows::data
