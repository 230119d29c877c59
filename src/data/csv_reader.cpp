// The CSV/TSV format reader: tables read straight into float/int64 buffers (CsvTable); see csv.h. The dataset
// over such a table is csv_dataset.cpp.
//
// The parser is written by hand: no CSV library packaged in Debian parses into numeric buffers (libcsv hands every
// field to a callback as a copied buffer), and W1's 100 MB table must parse in well under two seconds on one core.
// The file is read in chunks with fread; the hot path is one std::from_chars per field, which stops at the
// delimiter. Quotes, spaces, missing-value tokens and errors take a slower path that looks at the whole field.
#include "bellows/data/csv.h"

#include <ATen/ATen.h>
#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <set>
#include <string_view>
#include <system_error>

#include "bellows/util/check.h"    // defines: BELLOWS_CHECK_*, BELLOWS_FAIL
#include "bellows/util/suggest.h"  // defines: closest_match

namespace bellows::data {
namespace {

constexpr std::string_view kBom = "\xEF\xBB\xBF";
constexpr std::size_t kShownChars = 40;  // longest field text quoted in an error message

enum class Missing { kError, kDrop, kZero, kMean };
enum class Kind : std::uint8_t { kSkip, kFloat, kInt, kCategorical };

std::string shown(std::string_view s) {
  return s.size() <= kShownChars ? std::string(s) : fmt::format("{}...", s.substr(0, kShownChars - 3));
}

bool is_space(char c) {
  return c == ' ' || c == '\t';
}

// Whole of `s` is a number (from_chars syntax, an optional leading '+').
bool parses_as_number(std::string_view s, double& value) {
  const char* b = s.data();
  const char* e = b + s.size();
  if (b != e && *b == '+' && b + 1 != e && b[1] != '-') ++b;
  const auto [q, ec] = std::from_chars(b, e, value);
  return q == e && b != e && (ec == std::errc{} || ec == std::errc::result_out_of_range);
}

// --- chunked line reader ---

// Yields the file's lines without their "\n" / "\r\n". Reads `chunk_bytes` at a time; a line cut by the end of a
// chunk is moved to the front of the buffer and completed by the next read (the buffer grows for long lines).
class LineReader {
 public:
  LineReader(const std::filesystem::path& path, const std::string& shown_path, std::size_t chunk_bytes)
      : shown_path_(shown_path), chunk_bytes_(chunk_bytes) {
    file_ = std::fopen(path.c_str(), "rb");
    BELLOWS_CHECK_DATA(file_ != nullptr, fmt::format("{}: cannot open: {}", shown_path_, std::strerror(errno)),
                       "check the file's permissions");
    buffer_.resize(chunk_bytes_);
  }
  ~LineReader() { std::fclose(file_); }
  LineReader(const LineReader&) = delete;
  LineReader& operator=(const LineReader&) = delete;

  // The next line; false at the end of the file.
  bool next(std::string_view& line) {
    for (;;) {
      const char* base = buffer_.data();
      const void* nl = std::memchr(base + scanned_, '\n', end_ - scanned_);
      if (nl != nullptr) {
        const std::size_t at = static_cast<const char*>(nl) - base;
        line = std::string_view(base + begin_, at - begin_);
        begin_ = scanned_ = at + 1;
        return finish(line, true);
      }
      scanned_ = end_;
      if (eof_) {
        if (begin_ == end_) return false;
        line = std::string_view(base + begin_, end_ - begin_);
        begin_ = scanned_ = end_;
        return finish(line, false);
      }
      refill();
    }
  }

  std::int64_t line_number() const { return line_number_; }
  bool terminated() const { return terminated_; }  // whether the last line returned ended in "\n"

 private:
  bool finish(std::string_view& line, bool terminated) {
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    ++line_number_;
    terminated_ = terminated;
    return true;
  }

  void refill() {
    const std::size_t carry = end_ - begin_;
    std::memmove(buffer_.data(), buffer_.data() + begin_, carry);
    scanned_ -= begin_;
    begin_ = 0;
    end_ = carry;
    if (buffer_.size() < carry + chunk_bytes_) buffer_.resize(std::max(carry + chunk_bytes_, 2 * buffer_.size()));
    const std::size_t got = std::fread(buffer_.data() + end_, 1, chunk_bytes_, file_);
    end_ += got;
    if (got < chunk_bytes_) {
      BELLOWS_CHECK_DATA(!std::ferror(file_), fmt::format("{}: read error: {}", shown_path_, std::strerror(errno)),
                         "check the disk and the file");
      eof_ = true;
    }
  }

  std::string shown_path_;
  std::size_t chunk_bytes_;
  std::FILE* file_ = nullptr;
  std::vector<char> buffer_;
  std::size_t begin_ = 0;    // start of the current (unfinished) line
  std::size_t scanned_ = 0;  // searched for '\n' up to here
  std::size_t end_ = 0;      // bytes in the buffer
  bool eof_ = false;
  bool terminated_ = true;
  std::int64_t line_number_ = 0;
};

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

// --- the table reader ---

struct Column {
  Kind kind = Kind::kSkip;
  bool to_y = false;      // destination: "y" (else "x")
  std::int64_t dest = 0;  // column of x or y
  int category = -1;      // index into TableReader::categories_ for categorical columns
};

// Distinct values of one categorical column. Ids are provisional (first-seen order) while reading and become
// ranks in sorted order at the end.
struct Categories {
  std::map<std::string, std::int64_t, std::less<>> ids;
  std::string staged;  // this row's value, looked up only if the row is kept
  bool staged_missing = false;
};

struct MissingCell {
  std::int64_t row;
  std::size_t column;  // file column
};

class TableReader {
 public:
  explicit TableReader(const CsvOptions& options)
      : options_(options),
        path_(options.path.string()),
        delimiter_(choose_delimiter(options)),
        missing_(parse_missing(options.missing)) {
    for (const auto& token : options_.missing_tokens) {
      double v;
      if (parses_as_number(token, v) && !std::isnan(v)) numeric_missing_token_ = true;
    }
  }

  CsvTable read();

 private:
  // --- errors ---
  std::string where(std::int64_t line, std::size_t column) const {
    if (column < header_.size()) return fmt::format("{} line {}, column '{}'", path_, line, header_[column]);
    return fmt::format("{} line {}, field {}", path_, line, column + 1);
  }
  [[noreturn]] void fail_field(std::size_t column, const std::string& what, const std::string& hint) const {
    BELLOWS_FAIL(ErrorKind::kData, fmt::format("{}: {}", where(line_, column), what), hint);
  }
  // Fields of `line`, delimiters inside quotes not counted (for messages and the last line only).
  std::size_t count_fields(std::string_view line) const {
    std::size_t fields = 1;
    bool quoted = false;
    for (const char c : line) {
      if (c == '"') {
        quoted = !quoted;
      } else if (c == delimiter_ && !quoted) {
        ++fields;
      }
    }
    return fields;
  }
  [[noreturn]] void wrong_field_count(std::string_view line, bool terminated) const;
  [[noreturn]] void not_a_number(std::size_t column, std::string_view s, const char* expected) const;

  // --- header ---
  void read_header(LineReader& lines);
  std::size_t column_index(const std::string& name, const char* list) const;
  void plan_columns();

  // --- fields ---
  std::string_view read_field(const char*& p, const char* end, std::size_t column);
  std::string_view read_quoted(const char* quote, const char* end, std::size_t column, const char*& p);
  void skip_field(const char*& p, const char* end, std::size_t column);
  bool is_missing(std::string_view s) const {
    return std::find(options_.missing_tokens.begin(), options_.missing_tokens.end(), s) !=
           options_.missing_tokens.end();
  }
  // Records a missing value; true if the row is to be dropped.
  bool on_missing(std::size_t column, std::string_view s);
  float parse_float(std::string_view s, std::size_t column) const;
  std::int64_t parse_int(std::string_view s, std::size_t column) const;

  // The fast paths: a plain number ending at the delimiter or the line end. Fields that are quoted, padded, missing
  // or bad fall through to the slow path.
  template <typename T>
  bool fast_number(const char*& p, const char* end, T& out) const {
    if (numeric_missing_token_) return false;
    T v;
    const auto [q, ec] = std::from_chars(p, end, v);
    if (ec != std::errc{} || (q != end && *q != delimiter_)) return false;
    if constexpr (std::is_floating_point_v<T>) {
      if (std::isnan(v)) return false;  // "nan" may be a missing token
    }
    out = v;
    p = q;
    return true;
  }

  // --- rows ---
  void reserve_row();
  void parse_row(std::string_view line);
  void finish_categories(CsvTable& table);
  void fill_missing();
  double column_value(std::int64_t row, const Column& c) const;
  void set_column_value(std::int64_t row, const Column& c, double v);
  CsvTable build_table();

  const CsvOptions& options_;
  std::string path_;  // as given, for messages
  char delimiter_;
  Missing missing_;
  bool numeric_missing_token_ = false;  // a missing token such as "-999" that from_chars would accept

  std::vector<std::string> header_;
  std::vector<Column> columns_;  // one per header column
  std::vector<std::size_t> feature_columns_, target_columns_;
  std::int64_t features_ = 0, targets_ = 0;
  bool labels_ = false;  // "y" is int64 [N]
  std::vector<Categories> categories_;
  std::vector<std::size_t> category_columns_;  // file column of each categories_ entry

  std::vector<float> x_, y_float_;
  std::vector<std::int64_t> y_label_;
  std::int64_t rows_ = 0, capacity_rows_ = 0;
  std::vector<std::int64_t> lines_;
  std::vector<MissingCell> missing_cells_;
  std::int64_t dropped_ = 0;
  std::int64_t line_ = 0;  // line being parsed
  std::string scratch_;    // unescaped text of a quoted field with "" inside
};

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
               "fill it in, or list \"\" in missing_tokens and choose a missing policy");
  }
  fail_field(column, fmt::format("'{}' is not {}", shown(s), expected),
             "fix the value; if it marks a missing value, list it in missing_tokens");
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

}  // namespace

CsvTable read_csv(const CsvOptions& options) {
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
