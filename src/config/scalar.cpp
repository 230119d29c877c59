// YAML 1.2 core-schema scalar resolution and value descriptions for messages; see scalar.h.
#include "config/scalar.h"

#include <fmt/format.h>

#include <charconv>
#include <cmath>
#include <cstdlib>
#include <limits>
#include <regex>
#include <string_view>

namespace bellows::config::detail {
namespace {

constexpr const char* kStrTag = "tag:yaml.org,2002:str";

bool is_core_bool(std::string_view s) {
  return s == "true" || s == "True" || s == "TRUE" || s == "false" || s == "False" || s == "FALSE";
}

// The core schema's int forms: decimal with optional sign, 0o octal, 0x hex.
bool is_core_int(const std::string& s) {
  static const std::regex int_form("[-+]?[0-9]+|0o[0-7]+|0x[0-9a-fA-F]+");
  return std::regex_match(s, int_form);
}

bool is_core_float(const std::string& s) {
  static const std::regex float_form(
      R"([-+]?(\.[0-9]+|[0-9]+(\.[0-9]*)?)([eE][-+]?[0-9]+)?|[-+]?\.(inf|Inf|INF)|\.(nan|NaN|NAN))");
  return std::regex_match(s, float_form);
}

std::string shorten(const std::string& text) {
  constexpr std::size_t kMax = 60;
  return text.size() <= kMax ? text : text.substr(0, kMax) + "...";
}

}  // namespace

bool is_forced_string(const YAML::Node& node) {
  return node.IsScalar() && (node.Tag() == "!" || node.Tag() == kStrTag);
}

ScalarKind classify(const YAML::Node& node) {
  if (!node.IsDefined() || node.IsNull()) return ScalarKind::kNull;
  if (!node.IsScalar()) return ScalarKind::kNotScalar;
  if (is_forced_string(node)) return ScalarKind::kString;
  const std::string& s = node.Scalar();
  if (is_core_bool(s)) return ScalarKind::kBool;
  if (is_core_int(s)) return ScalarKind::kInt;
  if (is_core_float(s)) return ScalarKind::kDouble;
  return ScalarKind::kString;
}

std::optional<bool> as_bool(const YAML::Node& node) {
  if (classify(node) != ScalarKind::kBool) return std::nullopt;
  return node.Scalar()[0] == 't' || node.Scalar()[0] == 'T';
}

std::optional<std::int64_t> as_int(const YAML::Node& node) {
  if (classify(node) != ScalarKind::kInt) return std::nullopt;
  std::string_view s = node.Scalar();
  int base = 10;
  bool negative = false;
  if (s.starts_with("0x")) {
    base = 16;
    s.remove_prefix(2);
  } else if (s.starts_with("0o")) {
    base = 8;
    s.remove_prefix(2);
  } else if (s.front() == '+' || s.front() == '-') {
    negative = s.front() == '-';
    s.remove_prefix(1);
  }
  // Parse the magnitude unsigned so that INT64_MIN, whose magnitude exceeds INT64_MAX, still reads.
  std::uint64_t magnitude = 0;
  const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), magnitude, base);
  if (ec != std::errc() || end != s.data() + s.size()) return std::nullopt;
  constexpr auto kMax = static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max());
  if (!negative) {
    if (magnitude > kMax) return std::nullopt;
    return static_cast<std::int64_t>(magnitude);
  }
  if (magnitude > kMax + 1) return std::nullopt;
  return magnitude == kMax + 1 ? std::numeric_limits<std::int64_t>::min() : -static_cast<std::int64_t>(magnitude);
}

std::optional<double> as_double(const YAML::Node& node) {
  const ScalarKind kind = classify(node);
  if (kind == ScalarKind::kInt) {
    if (const auto i = as_int(node)) return static_cast<double>(*i);
  }
  if (kind != ScalarKind::kInt && kind != ScalarKind::kDouble) return std::nullopt;
  std::string_view s = node.Scalar();
  const bool negative = s.front() == '-';
  if (s.front() == '+' || s.front() == '-') s.remove_prefix(1);
  if (s.size() == 4 && s.front() == '.' && (s[1] == 'i' || s[1] == 'I')) {
    return negative ? -std::numeric_limits<double>::infinity() : std::numeric_limits<double>::infinity();
  }
  if (s.size() == 4 && s.front() == '.' && (s[1] == 'n' || s[1] == 'N')) {
    return std::numeric_limits<double>::quiet_NaN();
  }
  double value = 0;
  const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), value);
  if (ec == std::errc::result_out_of_range) {
    // 1e999 and 1e-999 have the core-schema form: read them as strtod does (inf, 0), like Python and LibTorch.
    value = std::strtod(std::string(s).c_str(), nullptr);
  } else if (ec != std::errc() || end != s.data() + s.size()) {
    return std::nullopt;
  }
  return negative ? -value : value;
}

std::string describe(const YAML::Node& node) {
  if (!node.IsDefined()) return "nothing";
  switch (node.Type()) {
    case YAML::NodeType::Null: return "an empty value (null)";
    case YAML::NodeType::Sequence: return "a list";
    case YAML::NodeType::Map: return "a mapping";
    case YAML::NodeType::Scalar: break;
    default: return "nothing";
  }
  if (is_forced_string(node)) return fmt::format("\"{}\" (a quoted string)", shorten(node.Scalar()));
  if (classify(node) == ScalarKind::kString) return fmt::format("'{}'", shorten(node.Scalar()));
  return shorten(node.Scalar());
}

std::string shortest_double_text(double value) {
  if (std::isnan(value)) return ".nan";
  if (std::isinf(value)) return value > 0 ? ".inf" : "-.inf";
  std::string text = fmt::format("{}", value);
  // fmt writes 1.0 as "1", which would read back as an int.
  if (text.find_first_of(".eEn") == std::string::npos) text += ".0";
  return text;
}

void shorten_code_doubles(YAML::Node& node) {
  if (node.IsScalar()) {
    if (!node.Tag().empty() || classify(node) != ScalarKind::kDouble) return;
    // Only text that is exactly what yaml-cpp writes for a double (17 digits) is rewritten, so that a string
    // such as "2.10" set in code keeps its text.
    const double value = *as_double(node);
    if (std::isfinite(value) && node.Scalar() == fmt::format("{:.17g}", value)) {
      node = YAML::Node(shortest_double_text(value));
    }
    return;
  }
  if (node.IsSequence()) {
    for (YAML::Node element : node) shorten_code_doubles(element);  // handles into the list: rewritten in place
    return;
  }
  if (node.IsMap()) {
    for (auto entry : node) shorten_code_doubles(entry.second);
  }
}

}  // namespace bellows::config::detail
