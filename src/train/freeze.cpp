// Freezing by glob over dotted parameter names, with fnmatch(3): `*` and `?` cross dots (no FNM_PATHNAME),
// so "encoder.*" reaches every depth below encoder.
#include "bellows/train/freeze.h"

#include <ATen/ATen.h>
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <fnmatch.h>

#include <set>

#include "bellows/util/check.h"
#include "bellows/util/suggest.h"

namespace bellows::train {
namespace {

// Things a user might have meant: the names themselves, each dotted prefix as "prefix.*", and each dotted
// suffix as "*.suffix". The closest of these to a pattern that matched nothing is the suggestion.
std::vector<std::string> candidates(const std::vector<std::pair<std::string, at::Tensor>>& params) {
  std::set<std::string> out;
  for (const auto& [name, t] : params) {
    out.insert(name);
    for (std::size_t dot = name.find('.'); dot != std::string::npos; dot = name.find('.', dot + 1)) {
      out.insert(name.substr(0, dot) + ".*");
      out.insert("*" + name.substr(dot));
    }
  }
  return {out.begin(), out.end()};
}

std::string no_match_hint(const std::string& pattern, const std::vector<std::pair<std::string, at::Tensor>>& params) {
  if (params.empty()) return "the model has no parameters";
  if (auto best = closest_match(pattern, candidates(params))) {
    if (best->find('*') == std::string::npos) return fmt::format("did you mean '{}'?", *best);
    for (const auto& [name, t] : params) {
      if (glob_match(*best, name)) return fmt::format("did you mean '{}' (matches '{}', ...)?", *best, name);
    }
  }
  std::vector<std::string> some;
  for (std::size_t i = 0; i < params.size() && i < 4; ++i) some.push_back("'" + params[i].first + "'");
  return fmt::format("parameters are named like {}{}", fmt::join(some, ", "), params.size() > 4 ? ", ..." : "");
}

}  // namespace

bool glob_match(const std::string& pattern, const std::string& name) {
  return fnmatch(pattern.c_str(), name.c_str(), 0) == 0;
}

std::vector<std::string> freeze(const std::vector<std::pair<std::string, at::Tensor>>& params,
                                const std::vector<std::string>& patterns) {
  // Check every pattern before touching a parameter, so that a typo freezes nothing.
  std::vector<bool> hit(params.size(), false);
  for (const auto& pattern : patterns) {
    bool any = false;
    for (std::size_t i = 0; i < params.size(); ++i) {
      if (glob_match(pattern, params[i].first)) hit[i] = any = true;
    }
    BELLOWS_CHECK_CONFIG(any, fmt::format("freeze pattern '{}' matches no parameter", pattern),
                         no_match_hint(pattern, params));
  }
  std::vector<std::string> frozen;
  for (std::size_t i = 0; i < params.size(); ++i) {
    if (!hit[i]) continue;
    at::Tensor t = params[i].second;
    t.requires_grad_(false);
    t.mutable_grad().reset();  // a gradient left from earlier training would only hold memory
    frozen.push_back(params[i].first);
  }
  return frozen;
}

}  // namespace bellows::train
