// Freezing by name pattern (seed 004's frozen encoder): matching parameters stop requiring gradients, so
// autograd allocates no gradient for them and the optimizer keeps no state for them.
#pragma once

#include <ATen/core/Tensor.h>

#include <string>
#include <utility>
#include <vector>

namespace bellows::train {

// Patterns are globs over dotted parameter names ("encoder.*", "*.bias", "layers.[0-3].*").
// Returns the names frozen. A pattern that matches no parameter raises a kConfig error naming it and
// suggesting the closest parameter name.
std::vector<std::string> freeze(const std::vector<std::pair<std::string, at::Tensor>>& params,
                                const std::vector<std::string>& patterns);

bool glob_match(const std::string& pattern, const std::string& name);

}  // namespace bellows::train
