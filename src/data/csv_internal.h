// The CSV reader's parts (data/csv.h): the chunked line reader, the option checks and the table reader, whose hot
// path (fields and rows) is csv_reader.cpp and the rest (header, columns, categories, missing values, the table)
// csv_table.cpp. Private to data/.
#pragma once

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
#include <filesystem>
#include <limits>
#include <map>
#include <set>
#include <string>
#include <string_view>
#include <system_error>
#include <vector>

#include "bellows/util/check.h"    // defines: BELLOWS_CHECK_*, BELLOWS_FAIL
#include "bellows/util/suggest.h"  // defines: closest_match

namespace bellows::data::csv_internal {

constexpr std::string_view kBom = "\xEF\xBB\xBF";
constexpr std::size_t kShownChars = 40;  // longest field text quoted in an error message

enum class Missing { kError, kDrop, kZero, kMean };
enum class Kind : std::uint8_t { kSkip, kFloat, kInt, kCategorical };

inline std::string shown(std::string_view s) {
  return s.size() <= kShownChars ? std::string(s) : fmt::format("{}...", s.substr(0, kShownChars - 3));
}

inline bool is_space(char c) {
  return c == ' ' || c == '\t';
}

// Whole of `s` is a number (from_chars syntax, an optional leading '+').
inline bool parses_as_number(std::string_view s, double& value) {
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

Missing parse_missing(const std::string& policy);
void check_unique(const std::vector<std::string>& names, const char* list);
void check_disjoint(const std::vector<std::string>& a, const char* a_list, const std::vector<std::string>& b, const char* b_list,
                    const char* hint);
char choose_delimiter(const CsvOptions& o);

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

}  // namespace bellows::data::csv_internal
