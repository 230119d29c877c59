// Reading procfs/sysfs text: see sysfs.h.
#include "hw/sysfs.h"

#include <charconv>
#include <fstream>
#include <sstream>

namespace bellows::hw::sysfs {

std::optional<std::string> read_file(const std::filesystem::path& path) {
  std::ifstream in(path);
  if (!in) return std::nullopt;
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

std::optional<std::string> read_first_line(const std::filesystem::path& path) {
  std::ifstream in(path);
  std::string line;
  if (!in || !std::getline(in, line)) return std::nullopt;
  return trim(line);
}

std::optional<std::int64_t> read_int(const std::filesystem::path& path) {
  auto line = read_first_line(path);
  if (!line) return std::nullopt;
  std::int64_t value = 0;
  auto [end, ec] = std::from_chars(line->data(), line->data() + line->size(), value);
  if (ec != std::errc() || end != line->data() + line->size()) return std::nullopt;
  return value;
}

std::string trim(std::string_view text) {
  const auto first = text.find_first_not_of(" \t\r\n");
  if (first == std::string_view::npos) return {};
  const auto last = text.find_last_not_of(" \t\r\n");
  return std::string(text.substr(first, last - first + 1));
}

std::optional<std::set<int>> parse_cpu_list(std::string_view text) {
  std::set<int> cpus;
  const std::string list = trim(text);
  if (list.empty()) return cpus;
  std::size_t pos = 0;
  while (pos <= list.size()) {
    const std::size_t comma = std::min(list.find(',', pos), list.size());
    const std::string_view item(list.data() + pos, comma - pos);
    int lo = 0, hi = 0;
    const auto dash = item.find('-');
    const auto parse = [](std::string_view s, int& out) {
      auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), out);
      return ec == std::errc() && end == s.data() + s.size() && !s.empty();
    };
    if (dash == std::string_view::npos) {
      if (!parse(item, lo)) return std::nullopt;
      hi = lo;
    } else if (!parse(item.substr(0, dash), lo) || !parse(item.substr(dash + 1), hi) || hi < lo) {
      return std::nullopt;
    }
    for (int cpu = lo; cpu <= hi; ++cpu) cpus.insert(cpu);
    pos = comma + 1;
  }
  return cpus;
}

std::optional<std::int64_t> parse_size(std::string_view text) {
  const std::string s = trim(text);
  std::int64_t value = 0;
  auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), value);
  if (ec != std::errc() || end == s.data()) return std::nullopt;
  const std::string_view suffix(end, s.data() + s.size() - end);
  if (suffix.empty()) return value;
  if (suffix == "K") return value << 10;
  if (suffix == "M") return value << 20;
  if (suffix == "G") return value << 30;
  return std::nullopt;
}

std::map<std::string, std::string> parse_key_values(std::string_view text, char separator) {
  std::map<std::string, std::string> values;
  std::size_t pos = 0;
  while (pos < text.size()) {
    std::size_t eol = text.find('\n', pos);
    if (eol == std::string_view::npos) eol = text.size();
    const std::string_view line = text.substr(pos, eol - pos);
    pos = eol + 1;
    if (trim(line).empty()) {
      if (!values.empty()) break;  // end of the first block (the first CPU in /proc/cpuinfo)
      continue;
    }
    const auto sep = line.find(separator);
    if (sep == std::string_view::npos) continue;
    values.emplace(trim(line.substr(0, sep)), trim(line.substr(sep + 1)));
  }
  return values;
}

}  // namespace bellows::hw::sysfs
