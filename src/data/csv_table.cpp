// The CSV reader's header, columns, categories, missing values and the finished table, and the checks of its options
// (csv_internal.h; the hot path is csv_reader.cpp).
#include "bellows/data/csv.h"
#include "csv_internal.h"

namespace bellows::data::csv_internal {

// --- options ---

Missing parse_missing(const std::string& policy) {
  static const std::vector<std::string> kPolicies = {"error", "drop", "zero", "mean"};
  if (policy == "error") return Missing::kError;
  if (policy == "drop") return Missing::kDrop;
  if (policy == "zero") return Missing::kZero;
  if (policy == "mean") return Missing::kMean;
  const auto guess = closest_match(policy, kPolicies);
  BELLOWS_FAIL(ErrorKind::kConfig,
               fmt::format("missing is '{}'{}", policy, guess ? fmt::format(" (did you mean '{}'?)", *guess) : ""),
               "set missing to one of error, drop, zero, mean");
}

void check_unique(const std::vector<std::string>& names, const char* list) {
  std::set<std::string> seen;
  for (const auto& n : names) {
    BELLOWS_CHECK_CONFIG(seen.insert(n).second, fmt::format("column '{}' is listed twice in {}", n, list),
                         fmt::format("list each column once in {}", list));
  }
}

void check_disjoint(const std::vector<std::string>& a, const char* a_list, const std::vector<std::string>& b,
                    const char* b_list, const char* hint) {
  for (const auto& n : a) {
    BELLOWS_CHECK_CONFIG(std::find(b.begin(), b.end(), n) == b.end(),
                         fmt::format("column '{}' is in both {} and {}", n, a_list, b_list), hint);
  }
}

char choose_delimiter(const CsvOptions& o) {
  if (o.delimiter != 0) {
    BELLOWS_CHECK_CONFIG(o.delimiter != '"' && o.delimiter != '\n' && o.delimiter != '\r' && o.delimiter != ' ',
                         fmt::format("delimiter is '{}'", o.delimiter == '\n'   ? std::string("\\n")
                                                          : o.delimiter == '\r' ? std::string("\\r")
                                                                                : std::string(1, o.delimiter)),
                         "use ',', '\\t', ';' or '|' (or 0 to choose by the file extension)");
    return o.delimiter;
  }
  std::string ext = o.path.extension().string();
  std::transform(ext.begin(), ext.end(), ext.begin(), [](unsigned char c) { return std::tolower(c); });
  return ext == ".tsv" || ext == ".tab" ? '\t' : ',';
}

void TableReader::wrong_field_count(std::string_view line, bool terminated) const {
  const std::size_t fields = count_fields(line);
  BELLOWS_FAIL(
      ErrorKind::kData,
      fmt::format("{} line {}: {} field{}, the header has {}{}", path_, line_, fields, fields == 1 ? "" : "s",
                  header_.size(), terminated ? "" : " (the last line has no line end: is the file truncated?)"),
      terminated ? "give every row one field per header column" : "recreate or re-download the file");
}

void TableReader::not_a_number(std::size_t column, std::string_view s, const char* expected) const {
  if (s.empty()) {
    fail_field(column, fmt::format("an empty field is not {}", expected),
               "fill it in, or list \"\" in data.csv.missing_tokens and choose data.csv.missing (drop, zero, mean)");
  }
  fail_field(column, fmt::format("'{}' is not {}", shown(s), expected),
             "fix the value; if it marks a missing value, list it in data.csv.missing_tokens and choose data.csv.missing");
}

// --- header ---

void TableReader::read_header(LineReader& lines) {
  std::string_view line;
  BELLOWS_CHECK_DATA(lines.next(line), fmt::format("{}: the file is empty", path_),
                     "expected a header line naming the columns, then one row per sample");
  line_ = 1;
  if (line.starts_with(kBom)) line.remove_prefix(kBom.size());
  BELLOWS_CHECK_DATA(!line.empty() || lines.terminated(), fmt::format("{}: the file is empty", path_),
                     "expected a header line naming the columns, then one row per sample");
  BELLOWS_CHECK_DATA(!line.empty(), fmt::format("{} line 1: no header: the line is blank", path_),
                     "start the file with a header line naming the columns");
  BELLOWS_CHECK_DATA(line.find('\r') == std::string_view::npos,
                     fmt::format("{} line 1: a carriage return inside the line: lines end in a lone \\r", path_),
                     "convert the file to \\n or \\r\\n line ends (e.g. with dos2unix -c mac)");
  const char* p = line.data();
  const char* end = p + line.size();
  for (std::size_t j = 0;; ++j) {
    header_.emplace_back(read_field(p, end, j));
    if (p == end) break;
    ++p;
  }
  const bool all_numbers = std::all_of(header_.begin(), header_.end(), [](const std::string& name) {
    double v;
    return parses_as_number(name, v);
  });
  BELLOWS_CHECK_DATA(
      !all_numbers,
      fmt::format("{} line 1: no header: the line holds numbers ('{}'), not column names", path_, shown(header_[0])),
      "add a header line naming the columns");
  std::map<std::string_view, std::size_t> first;
  for (std::size_t j = 0; j < header_.size(); ++j) {
    const auto [it, fresh] = first.emplace(header_[j], j);
    BELLOWS_CHECK_DATA(fresh,
                       fmt::format("{} line 1: column '{}' appears twice in the header (fields {} and {})", path_,
                                   header_[j], it->second + 1, j + 1),
                       "give every column a distinct name");
  }
}

std::size_t TableReader::column_index(const std::string& name, const char* list) const {
  const auto it = std::find(header_.begin(), header_.end(), name);
  if (it != header_.end()) return static_cast<std::size_t>(it - header_.begin());
  const auto guess = closest_match(name, header_);
  std::string columns;
  for (std::size_t j = 0; j < header_.size() && j < 20; ++j)
    columns += fmt::format("{}'{}'", j ? ", " : "", header_[j]);
  if (header_.size() > 20) columns += fmt::format(", ... ({} in all)", header_.size());
  BELLOWS_FAIL(ErrorKind::kData,
               fmt::format("{} line 1: no column '{}' (named in {}){}; the header has {}", path_, name, list,
                           guess ? fmt::format(", did you mean '{}'?", *guess) : "", columns),
               fmt::format("name columns in {} exactly as the header spells them", list));
}

void TableReader::plan_columns() {
  columns_.assign(header_.size(), Column{});
  for (const auto& name : options_.targets) target_columns_.push_back(column_index(name, "targets"));
  if (options_.features.empty()) {
    for (std::size_t j = 0; j < header_.size(); ++j) {
      if (std::find(target_columns_.begin(), target_columns_.end(), j) == target_columns_.end()) {
        feature_columns_.push_back(j);
      }
    }
  } else {
    for (const auto& name : options_.features) feature_columns_.push_back(column_index(name, "features"));
  }
  BELLOWS_CHECK_CONFIG(!feature_columns_.empty(),
                       fmt::format("{}: no feature columns: every column is a target", path_),
                       "list the feature columns, or fewer targets");
  std::set<std::size_t> categorical, integer;
  for (const auto& name : options_.categorical) categorical.insert(column_index(name, "categorical"));
  for (const auto& name : options_.integer) integer.insert(column_index(name, "integer"));

  features_ = static_cast<std::int64_t>(feature_columns_.size());
  targets_ = static_cast<std::int64_t>(target_columns_.size());
  auto assign = [&](std::size_t j, bool to_y, std::int64_t dest) {
    Column& c = columns_[j];
    c.to_y = to_y;
    c.dest = dest;
    c.kind = categorical.count(j) ? Kind::kCategorical : integer.count(j) ? Kind::kInt : Kind::kFloat;
    if (c.kind == Kind::kCategorical) {
      c.category = static_cast<int>(categories_.size());
      categories_.emplace_back();
      category_columns_.push_back(j);
    }
  };
  for (std::int64_t k = 0; k < features_; ++k) assign(feature_columns_[k], false, k);
  for (std::int64_t k = 0; k < targets_; ++k) assign(target_columns_[k], true, k);
  labels_ = targets_ == 1 && columns_[target_columns_[0]].kind != Kind::kFloat;
}

void TableReader::finish_categories(CsvTable& table) {
  for (std::size_t k = 0; k < categories_.size(); ++k) {
    const std::size_t j = category_columns_[k];
    std::vector<std::int64_t> rank(categories_[k].ids.size());
    std::vector<std::string> values;
    for (const auto& [value, id] : categories_[k].ids) {  // std::map: sorted
      rank[id] = static_cast<std::int64_t>(values.size());
      values.push_back(value);
    }
    for (std::int64_t r = 0; r < rows_; ++r) {
      const auto id = static_cast<std::int64_t>(column_value(r, columns_[j]));
      set_column_value(r, columns_[j], rank.empty() ? 0.0 : static_cast<double>(rank[id]));
    }
    table.categories.emplace(header_[j], std::move(values));
  }
}

void TableReader::fill_missing() {
  if (missing_cells_.empty()) return;
  std::map<std::size_t, std::vector<char>> missing_rows;  // file column -> row is missing
  for (const auto& cell : missing_cells_) {
    auto& flags = missing_rows[cell.column];
    flags.resize(rows_, 0);
    flags[cell.row] = 1;
  }
  for (const auto& [j, flags] : missing_rows) {
    const Column& c = columns_[j];
    double fill = 0;
    if (missing_ == Missing::kMean) {
      std::int64_t present = 0;
      if (c.kind == Kind::kCategorical) {  // the most frequent value; ties go to the smaller index
        std::vector<std::int64_t> counts;
        for (std::int64_t r = 0; r < rows_; ++r) {
          if (flags[r]) continue;
          const auto v = static_cast<std::size_t>(column_value(r, c));
          if (v >= counts.size()) counts.resize(v + 1, 0);
          ++counts[v];
          ++present;
        }
        fill = static_cast<double>(std::max_element(counts.begin(), counts.end()) - counts.begin());
      } else {
        double sum = 0;
        for (std::int64_t r = 0; r < rows_; ++r) {
          if (flags[r]) continue;
          sum += column_value(r, c);
          ++present;
        }
        fill = present ? sum / static_cast<double>(present) : 0;
        if (c.kind == Kind::kInt) fill = std::round(fill);
      }
      BELLOWS_CHECK_DATA(
          present > 0,
          fmt::format("{}: column '{}' has no values at all, so missing=mean has no mean to use", path_, header_[j]),
          "fill the column in, or drop it from the features and targets");
    }
    for (std::int64_t r = 0; r < rows_; ++r) {
      if (flags[r]) set_column_value(r, c, fill);
    }
  }
}

CsvTable TableReader::build_table() {
  CsvTable table;
  finish_categories(table);
  fill_missing();
  for (const auto j : feature_columns_) table.feature_names.push_back(header_[j]);
  for (const auto j : target_columns_) table.target_names.push_back(header_[j]);
  at::Tensor x = at::empty({rows_, features_}, at::kFloat);
  std::memcpy(x.data_ptr<float>(), x_.data(), sizeof(float) * rows_ * features_);
  table.tensors.emplace("x", std::move(x));
  if (labels_) {
    at::Tensor y = at::empty({rows_}, at::kLong);
    std::memcpy(y.data_ptr<std::int64_t>(), y_label_.data(), sizeof(std::int64_t) * rows_);
    table.tensors.emplace("y", std::move(y));
  } else if (targets_ > 0) {
    at::Tensor y = at::empty({rows_, targets_}, at::kFloat);
    std::memcpy(y.data_ptr<float>(), y_float_.data(), sizeof(float) * rows_ * targets_);
    table.tensors.emplace("y", std::move(y));
  }
  table.lines = std::move(lines_);
  table.dropped_rows = dropped_;
  return table;
}

}  // namespace bellows::data::csv_internal
