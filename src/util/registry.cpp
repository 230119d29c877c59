// The errors of util/registry.h, out of line so the template stays small.
#include "bellows/util/registry.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "bellows/util/check.h"
#include "bellows/util/suggest.h"

namespace bellows {

std::string suggestion_hint(const std::string& name, const std::vector<std::string>& names) {
  const auto best = closest_match(name, names);
  return best ? fmt::format("did you mean '{}'? (valid: {})", *best, fmt::join(names, ", ")) : fmt::format("use one of: {}", fmt::join(names, ", "));
}

namespace detail {

void registry_duplicate(const std::string& what, const std::string& name) {
  BELLOWS_FAIL(ErrorKind::kInternal, fmt::format("{} '{}' is registered twice", what, name), fmt::format("give the {} another name", what));
}

void registry_unknown(const std::string& what, const std::string& name, std::vector<std::string> names) {
  std::sort(names.begin(), names.end());
  const auto match = closest_match(name, names);
  BELLOWS_FAIL(ErrorKind::kConfig,
               fmt::format("unknown {} '{}'{}", what, name, match ? fmt::format("; did you mean '{}'?", *match) : std::string()),
               fmt::format("registered {}s: {}", what, fmt::join(names, ", ")));
}

}  // namespace detail

}  // namespace bellows
