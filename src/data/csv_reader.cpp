// The CSV/TSV format reader: tables read straight into float/int64 buffers (CsvTable); see csv.h. The dataset
// over such a table is csv_dataset.cpp. This file is the reader's hot path: fields and rows (csv_internal.h; the
// header, columns, categories, missing values and the table are csv_table.cpp).
//
// The parser is written by hand: no CSV library packaged in Debian parses into numeric buffers (libcsv hands every
// field to a callback as a copied buffer), and W1's 100 MB table must parse in well under two seconds on one core.
// The file is read in chunks with fread; the hot path is one std::from_chars per field, which stops at the
// delimiter. Quotes, spaces, missing-value tokens and errors take a slower path that looks at the whole field.
#include "bellows/data/csv.h"
#include "csv_internal.h"

namespace bellows::data {
namespace csv_internal {

// --- fields ---

std::string_view TableReader::read_field(const char*& p, const char* end, std::size_t column) {
  const char* b = p;
  while (b != end && *b != delimiter_ && is_space(*b)) ++b;
  if (b != end && *b == '"') return read_quoted(b, end, column, p);
  const void* d = std::memchr(b, delimiter_, end - b);
  const char* e = d ? static_cast<const char*>(d) : end;
  p = e;
  while (e != b && is_space(e[-1])) --e;
  return {b, static_cast<std::size_t>(e - b)};
}

std::string_view TableReader::read_quoted(const char* quote, const char* end, std::size_t column, const char*& p) {
  const char* s = quote + 1;
  bool escaped = false;
  scratch_.clear();
  for (;;) {
    const void* found = std::memchr(s, '"', end - s);
    if (found == nullptr) {
      fail_field(column,
                 "unterminated quote: a quoted field must close on its own line (quoted line breaks are not supported)",
                 "close the quote, and write a quote inside a quoted field as \"\"");
    }
    const char* close = static_cast<const char*>(found);
    if (close + 1 != end && close[1] == '"') {  // "" is one quote
      scratch_.append(s, close + 1);
      s = close + 2;
      escaped = true;
      continue;
    }
    std::string_view content(quote + 1, close - quote - 1);
    if (escaped) {
      scratch_.append(s, close);
      content = scratch_;
    }
    const char* after = close + 1;
    while (after != end && *after != delimiter_ && is_space(*after)) ++after;
    if (after != end && *after != delimiter_) {
      fail_field(column, fmt::format("'{}' after the closing quote", shown(std::string_view(after, end - after))),
                 "put the delimiter right after a closing quote, and write a quote inside a quoted field as \"\"");
    }
    p = after;
    return content;
  }
}

void TableReader::skip_field(const char*& p, const char* end, std::size_t column) {
  const char* b = p;
  while (b != end && *b != delimiter_ && is_space(*b)) ++b;
  if (b != end && *b == '"') {
    read_quoted(b, end, column, p);
    return;
  }
  const void* d = std::memchr(b, delimiter_, end - b);
  p = d ? static_cast<const char*>(d) : end;
}

bool TableReader::on_missing(std::size_t column, std::string_view s) {
  switch (missing_) {
    case Missing::kError:
      fail_field(column, s.empty() ? std::string("missing value (empty field)") : fmt::format("missing value '{}'", s),
                 "fill it in, or set missing to drop, zero or mean");
    case Missing::kDrop: return true;
    case Missing::kZero:
    case Missing::kMean: missing_cells_.push_back({rows_, column}); return false;
  }
  return false;
}

float TableReader::parse_float(std::string_view s, std::size_t column) const {
  double d;
  if (!parses_as_number(s, d)) not_a_number(column, s, "a number");
  const char* b = s.data();
  if (*b == '+') ++b;
  float v;
  const auto [q, ec] = std::from_chars(b, s.data() + s.size(), v);
  if (ec == std::errc{}) return v;
  // Out of float range: underflow becomes 0 (or a subnormal), overflow is an error.
  const auto [q2, ec2] = std::from_chars(b, s.data() + s.size(), d);
  if (ec2 != std::errc{} || std::abs(d) > std::numeric_limits<float>::max()) {
    fail_field(column, fmt::format("'{}' is out of the range of float32", shown(s)), "fix the value");
  }
  return static_cast<float>(d);
}

std::int64_t TableReader::parse_int(std::string_view s, std::size_t column) const {
  const char* b = s.data();
  const char* e = b + s.size();
  if (b != e && *b == '+' && b + 1 != e && b[1] != '-') ++b;
  std::int64_t v;
  const auto [q, ec] = std::from_chars(b, e, v);
  if (q == e && b != e) {
    if (ec == std::errc{}) return v;
    fail_field(column, fmt::format("'{}' is out of the range of int64", shown(s)), "fix the value");
  }
  not_a_number(column, s, "an integer");
}

// --- rows ---

void TableReader::reserve_row() {
  if (rows_ < capacity_rows_) return;
  capacity_rows_ = std::max<std::int64_t>(1024, 2 * capacity_rows_);
  x_.resize(capacity_rows_ * features_);
  if (labels_) {
    y_label_.resize(capacity_rows_);
  } else {
    y_float_.resize(capacity_rows_ * targets_);
  }
}

void TableReader::parse_row(std::string_view line) {
  reserve_row();
  float* const x = x_.data() + rows_ * features_;
  float* const y = labels_ ? nullptr : y_float_.data() + rows_ * targets_;
  const char* p = line.data();
  const char* const end = p + line.size();
  bool drop = false;
  for (std::size_t j = 0; j < columns_.size(); ++j) {
    if (j > 0) {
      if (p == end) wrong_field_count(line, true);
      ++p;  // the delimiter the previous field stopped at
    }
    const Column& c = columns_[j];
    switch (c.kind) {
      case Kind::kSkip: skip_field(p, end, j); break;
      case Kind::kFloat: {
        float& out = (c.to_y ? y : x)[c.dest];
        if (fast_number(p, end, out)) break;
        const std::string_view s = read_field(p, end, j);
        if (is_missing(s)) {
          drop |= on_missing(j, s);
          out = 0;
        } else {
          out = parse_float(s, j);
        }
        break;
      }
      case Kind::kInt: {
        std::int64_t v = 0;
        if (!fast_number(p, end, v)) {
          const std::string_view s = read_field(p, end, j);
          if (is_missing(s)) {
            drop |= on_missing(j, s);
          } else {
            v = parse_int(s, j);
          }
        }
        if (labels_ && c.to_y) {
          y_label_[rows_] = v;
        } else {
          (c.to_y ? y : x)[c.dest] = static_cast<float>(v);
        }
        break;
      }
      case Kind::kCategorical: {
        Categories& cat = categories_[c.category];
        const std::string_view s = read_field(p, end, j);
        cat.staged_missing = is_missing(s);
        if (cat.staged_missing) {
          drop |= on_missing(j, s);
        } else {
          cat.staged.assign(s);
        }
        break;
      }
    }
  }
  if (p != end) wrong_field_count(line, true);
  if (drop) {
    ++dropped_;
    return;
  }
  // Categories are counted only for kept rows, so a value seen only in dropped rows gets no index.
  for (std::size_t k = 0; k < categories_.size(); ++k) {
    Categories& cat = categories_[k];
    std::int64_t id = 0;
    if (!cat.staged_missing) {
      auto it = cat.ids.find(std::string_view(cat.staged));
      if (it == cat.ids.end()) it = cat.ids.emplace(cat.staged, static_cast<std::int64_t>(cat.ids.size())).first;
      id = it->second;
    }
    set_column_value(rows_, columns_[category_columns_[k]], static_cast<double>(id));
  }
  lines_.push_back(line_);
  ++rows_;
}

double TableReader::column_value(std::int64_t row, const Column& c) const {
  if (c.to_y && labels_) return static_cast<double>(y_label_[row]);
  return c.to_y ? y_float_[row * targets_ + c.dest] : x_[row * features_ + c.dest];
}

void TableReader::set_column_value(std::int64_t row, const Column& c, double v) {
  if (c.to_y && labels_) {
    y_label_[row] = static_cast<std::int64_t>(v);
  } else if (c.to_y) {
    y_float_[row * targets_ + c.dest] = static_cast<float>(v);
  } else {
    x_[row * features_ + c.dest] = static_cast<float>(v);
  }
}

CsvTable TableReader::read() {
  std::error_code ec;
  const auto status = std::filesystem::status(options_.path, ec);
  BELLOWS_CHECK_DATA(
      std::filesystem::exists(status), fmt::format("{}: no such file", path_),
      fmt::format("check the path (a relative path starts at {})", std::filesystem::current_path(ec).string()));
  BELLOWS_CHECK_DATA(!std::filesystem::is_directory(status), fmt::format("{}: is a directory, not a CSV file", path_),
                     "give the path of the CSV/TSV file");
  LineReader lines(options_.path, path_, options_.chunk_bytes);
  read_header(lines);
  plan_columns();

  // --- rows, one line at a time ---
  std::string_view line;
  while (lines.next(line)) {
    line_ = lines.line_number();
    if (line.empty()) continue;  // blank lines (often one at the end of the file)
    // The last line without a line end may be cut short: that shows as a field count error which says so.
    if (!lines.terminated() && count_fields(line) != header_.size()) wrong_field_count(line, false);
    parse_row(line);
  }

  BELLOWS_CHECK_DATA(rows_ > 0 || dropped_ > 0, fmt::format("{}: no data rows after the header", path_),
                     "the file needs one row per sample after the header line");
  BELLOWS_CHECK_DATA(
      rows_ > 0, fmt::format("{}: all {} rows have missing values and were dropped (missing=drop)", path_, dropped_),
      "use missing=zero or missing=mean, or fill the values in");
  return build_table();
}

}  // namespace csv_internal

CsvTable read_csv(const CsvOptions& options) {
  using namespace csv_internal;
  // Option checks that need no file come first, so that they are kConfig errors whatever the file holds.
  BELLOWS_CHECK_CONFIG(options.chunk_bytes > 0, "chunk_bytes is 0", "read at least one byte at a time");
  check_unique(options.features, "features");
  check_unique(options.targets, "targets");
  check_disjoint(options.features, "features", options.targets, "targets",
                 "a column is either an input or a target: remove it from one list");
  check_disjoint(options.categorical, "categorical", options.integer, "integer",
                 "a column is either categorical (text values) or integer: remove it from one list");
  TableReader reader(options);
  return reader.read();
}

}  // namespace bellows::data
