// Helpers shared by the config module's sources: dotted keys ("optim.lr") and the text of a multi-problem
// kConfig error. Private to the config module.
#pragma once

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <string>
#include <vector>

namespace bellows::config::detail {

// The parts of a dotted key; empty when the key is empty or has an empty part ("a..b", ".a", "a.").
inline std::vector<std::string> split_key(const std::string& key) {
  std::vector<std::string> parts;
  std::size_t start = 0;
  while (true) {
    const std::size_t dot = key.find('.', start);
    const std::string part = key.substr(start, dot == std::string::npos ? std::string::npos : dot - start);
    if (part.empty()) return {};
    parts.push_back(part);
    if (dot == std::string::npos) return parts;
    start = dot + 1;
  }
}

inline std::string join_key(const std::string& prefix, const std::string& name) {
  return prefix.empty() ? name : prefix + '.' + name;
}

// One problem per line; a count first when there are several, so that the first line still reads whole.
inline std::string problem_list(const std::vector<std::string>& problems) {
  if (problems.size() == 1) return problems.front();
  return fmt::format("{} configuration problems:\n{}", problems.size(), fmt::join(problems, "\n"));
}

}  // namespace bellows::config::detail
