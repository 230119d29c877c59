// data.source: csv -- CSV/TSV tables, columns by name (data.csv.*), as rows or as a series for sliding windows.
#include <fmt/format.h>

#include "bellows/config/binding.h"  // defines: Binding
#include "bellows/data/csv.h"
#include "bellows/data/csv_dataset.h"
#include "bellows/data/source_registry.h"
#include "bellows/data/tensor_dataset.h"

namespace bellows::data {
namespace {

// The data.csv.* keys of CsvOptions, bound once (config/binding.h).
const config::Binding<CsvOptions>& csv_binding() {
  using O = CsvOptions;
  using config::Type;
  return config::bound<O>("data.csv.", [](config::Binding<O>& b) {
    // A word or one character, into a char ('\0', auto: the file's extension decides).
    b.custom("delimiter", Type::kString, "field separator: auto (tab for .tsv/.tab, else comma), ',', ';', '|' or tab",
             [](const config::Config& c, const std::string& key, O& o) {
               const std::string delimiter = config::get_string(c, key);
               o.delimiter = delimiter == "auto" ? '\0' : delimiter == "tab" ? '\t' : delimiter[0];
             }).choices({"auto", ",", ";", "|", "tab"}).default_value(YAML::Node("auto"));
    b.key("features", &O::features, "input columns (empty: all but the targets)");
    b.key("targets", &O::targets, "target columns");
    b.key("categorical", &O::categorical, "columns whose values map to a class index");
    b.key("integer", &O::integer, "columns parsed as integers");
    b.key("missing", &O::missing, "missing values: error, drop the row, zero, or the column mean")
        .choices({"error", "drop", "zero", "mean"});
    b.key("missing_tokens", &O::missing_tokens, "field values that mean missing (data.csv.missing decides what becomes of them)");
    // A std::size_t, which a binding does not read as it is.
    b.custom("chunk_bytes", Type::kInt, "read size", [](const config::Config& c, const std::string& key, O& o) {
       o.chunk_bytes = static_cast<std::size_t>(config::get_int(c, key));
     }).min(4096).default_value(YAML::Node(static_cast<std::int64_t>(O{}.chunk_bytes)));
  });
}

CsvOptions csv_options(const SourceRequest& r) {
  CsvOptions o = csv_binding().read(*r.config);
  o.path = r.path;
  return o;
}

SourceEntry csv_source() {
  SourceEntry e;
  e.name = "csv";
  e.help = "CSV/TSV tables: typed and categorical columns, missing-value policy";
  e.add_keys = [](config::Schema& s) { csv_binding().declare(s); };
  e.open = [](const SourceRequest& r) -> std::shared_ptr<const Dataset> { return make_csv_dataset(csv_options(r)); };
  e.facts = [](const Dataset& d) {  // the categorical columns' value tables (written to the run directory)
    DataFacts f;
    if (const auto* table = dynamic_cast<const TensorDataset*>(&d)) f.categories = table->facts().categories;
    return f;
  };
  e.read_series = [](const SourceRequest& r) {
    CsvTable table = read_csv(csv_options(r));
    Series s;
    s.tensors = std::move(table.tensors);
    s.name = fmt::format("csv {}", r.path.string());
    s.describe_row = [lines = std::move(table.lines), p = r.path.string()](std::int64_t row) {
      return fmt::format("{} line {}", p, lines.at(static_cast<std::size_t>(row)));
    };
    return s;
  };
  return e;
}

const SourceRegistrar kCsvRegistered(csv_source());

}  // namespace
}  // namespace bellows::data
