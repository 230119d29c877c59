// data.source: csv -- CSV/TSV tables, columns by name (data.csv.*), as rows or as a series for sliding windows.
#include <fmt/format.h>

#include "bellows/data/csv.h"
#include "bellows/data/csv_dataset.h"
#include "bellows/data/source_registry.h"

namespace bellows::data {
namespace {

CsvOptions csv_options(const SourceRequest& r) {
  using namespace config;
  const Config& c = *r.config;
  CsvOptions o;
  o.path = r.path;
  const std::string delimiter = get_string(c, "data.csv.delimiter");
  o.delimiter = delimiter == "auto" ? '\0' : delimiter == "tab" ? '\t' : delimiter[0];
  o.features = get_string_list(c, "data.csv.features");
  o.targets = get_string_list(c, "data.csv.targets");
  o.categorical = get_string_list(c, "data.csv.categorical");
  o.integer = get_string_list(c, "data.csv.integer");
  o.missing = get_string(c, "data.csv.missing");
  o.chunk_bytes = static_cast<std::size_t>(get_int(c, "data.csv.chunk_bytes"));
  return o;
}

SourceEntry csv_source() {
  SourceEntry e;
  e.name = "csv";
  e.help = "CSV/TSV tables: typed and categorical columns, missing-value policy";
  e.add_keys = [](config::Schema& s) {
    using config::Type;
    auto node = [](auto v) { return YAML::Node(v); };
    const YAML::Node empty = YAML::Load("[]");
    s.add("data.csv.delimiter", Type::kString, "field separator: auto (tab for .tsv/.tab, else comma), ',', ';', '|' or tab")
        .choices({"auto", ",", ";", "|", "tab"}).default_value(node("auto"));
    s.add("data.csv.features", Type::kStringList, "input columns (empty: all but the targets)").default_value(empty);
    s.add("data.csv.targets", Type::kStringList, "target columns").default_value(empty);
    s.add("data.csv.categorical", Type::kStringList, "columns whose values map to a class index").default_value(empty);
    s.add("data.csv.integer", Type::kStringList, "columns parsed as integers").default_value(empty);
    s.add("data.csv.missing", Type::kString, "missing values: error, drop the row, zero, or the column mean")
        .choices({"error", "drop", "zero", "mean"}).default_value(node("error"));
    s.add("data.csv.chunk_bytes", Type::kInt, "read size").min(4096).default_value(node(4 << 20));
  };
  e.open = [](const SourceRequest& r) -> std::shared_ptr<const Dataset> { return make_csv_dataset(csv_options(r)); };
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
