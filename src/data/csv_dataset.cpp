// The dataset over a CSV/TSV table: read_csv's tensors served by a TensorDataset that names each sample by its
// file line; see csv_dataset.h.
#include "bellows/data/csv_dataset.h"

#include <fmt/format.h>

#include <vector>

#include "bellows/data/tensor_dataset.h"  // defines: TensorDataset

namespace bellows::data {

std::shared_ptr<Dataset> make_csv_dataset(const CsvOptions& options) {
  CsvTable table = read_csv(options);
  const std::string path = options.path.string();
  const auto rows = static_cast<std::int64_t>(table.lines.size());
  auto lines = std::make_shared<const std::vector<std::int64_t>>(std::move(table.lines));
  TensorDatasetOptions dataset_options;
  dataset_options.name = fmt::format("csv {} ({} rows, {} features)", path, rows, table.feature_names.size());
  dataset_options.facts.categories = std::move(table.categories);
  dataset_options.describe = [path, lines](std::int64_t index) {
    if (index < 0 || index >= static_cast<std::int64_t>(lines->size())) return fmt::format("{} row {}", path, index);
    return fmt::format("{} line {}", path, (*lines)[index]);
  };
  return std::make_shared<TensorDataset>(std::move(table.tensors), std::move(dataset_options));
}

}  // namespace bellows::data
