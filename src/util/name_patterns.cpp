// Glob patterns over block names; see name_patterns.h.
#include "bellows/util/name_patterns.h"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <fnmatch.h>

#include <set>

#include "bellows/util/check.h"

namespace bellows {

std::vector<std::string> select_names(const std::vector<std::string>& patterns, const std::vector<std::string>& names,
                                      const std::string& key) {
  std::set<std::string> chosen;
  for (const auto& pattern : patterns) {
    bool any = false;
    for (const auto& name : names) {
      if (fnmatch(pattern.c_str(), name.c_str(), 0) == 0) {
        chosen.insert(name);
        any = true;
      }
    }
    BELLOWS_CHECK_CONFIG(any, fmt::format("{}: pattern '{}' matches no block of the model", key, pattern),
                         names.empty() ? std::string("this model has no checkpointable blocks")
                                       : fmt::format("blocks: {}", fmt::join(names, ", ")));
  }
  std::vector<std::string> ordered;
  for (const auto& name : names) {
    if (chosen.contains(name)) ordered.push_back(name);
  }
  return ordered;
}

}  // namespace bellows
