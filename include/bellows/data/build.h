// From a description of the data (one struct, filled from the config's data block) to the training and
// validation datasets: the format's reader, optional sliding windows, and the train/validation split.
#pragma once

#include <filesystem>
#include <map>
#include <memory>
#include <string>

#include "bellows/data/csv.h"           // defines: CsvOptions
#include "bellows/data/dataset.h"       // defines: Dataset
#include "bellows/data/image_folder.h"  // defines: ImageFolderOptions
#include "bellows/data/netcdf.h"        // defines: NetcdfOptions
#include "bellows/data/npy.h"           // defines: NpyReadOptions
#include "bellows/data/synthetic.h"     // defines: SyntheticOptions
#include "bellows/data/text_pairs.h"    // defines: TextPairsOptions
#include "bellows/data/window.h"        // defines: WindowOptions

namespace bellows::data {

struct DataSpec {
  std::string source = "synthetic";  // synthetic | csv | npy | netcdf | image_folder | text_pairs
  std::filesystem::path path;        // the file (csv, npy/npz, netcdf) or folder (image_folder)
  std::filesystem::path val_path;    // separate validation data in the same format; empty: split off val_fraction
  double val_fraction = 0.1;
  std::string val_split = "auto";    // auto (tail for time series: windows and NetCDF; random otherwise) | tail | random
  std::uint64_t seed = 0;

  SyntheticOptions synthetic;
  CsvOptions csv;                    // path filled from `path`
  std::string npy_x = "x";           // .npz: array names; .npy: `path` is x, npy_y names another .npy or file.npz:array
  std::string npy_y = "y";
  NpyReadOptions npy;
  NetcdfOptions netcdf;
  ImageFolderOptions images;
  WindowOptions window;              // length 0: samples are rows, no windows
  TextPairsOptions text;             // path filled from `path`
  // Cross-validation: with cv_folds >= 2, the samples of `path` are assigned to folds (assign_folds: stratified
  // when the dataset knows its class labels, seeded by `seed`); fold cv_fold is the validation split and the
  // others train. val_fraction is then unused and val_path must be empty.
  std::int64_t cv_folds = 0;         // 0: no cross-validation
  std::int64_t cv_fold = 0;
};

struct DataSplits {
  std::shared_ptr<const Dataset> train;
  std::shared_ptr<const Dataset> val;  // null when there is no validation data
  bool temporal = false;               // samples are ordered in time (windows, NetCDF)
};

// kConfig errors for options that do not fit the source (e.g. windows over images); the readers' kData
// errors for bad files.
DataSplits build_datasets(const DataSpec& spec);

}  // namespace bellows::data
