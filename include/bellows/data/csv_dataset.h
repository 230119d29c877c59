// A Dataset over a CSV/TSV table: the dataset built on the reader of csv.h, each sample named by its file line.
//   auto ds = make_csv_dataset({.path = "train.csv", .targets = {"label"}, .categorical = {"label"}});
#pragma once

#include <memory>

#include "bellows/data/csv.h"      // defines: CsvOptions, read_csv
#include "bellows/data/dataset.h"  // defines: Dataset

namespace bellows::data {

// A TensorDataset over read_csv's table, named "csv <path> (<N> rows, <F> features)", with describe(i) =
// "<path> line <L>".
std::shared_ptr<Dataset> make_csv_dataset(const CsvOptions& options);

}  // namespace bellows::data
