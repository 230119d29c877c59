// "Did you mean ...?": the closest candidate to a misspelt name (a subcommand, a flag, a config key).
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace bellows {

// Levenshtein distance between a and b (insertions, deletions, substitutions cost 1).
std::size_t edit_distance(std::string_view a, std::string_view b);

// The candidate closest to `name`, if it is within max(2, |name|/3) edits or has `name` as a prefix.
std::optional<std::string> closest_match(std::string_view name, const std::vector<std::string>& candidates);

}  // namespace bellows
