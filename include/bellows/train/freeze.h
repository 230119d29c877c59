// Freezing by name pattern (seed 004's frozen encoder): matching parameters stop requiring gradients, so
// autograd allocates no gradient for them and the optimizer keeps no state for them.
#pragma once

#include <ATen/core/Tensor.h>

#include <string>
#include <utility>
#include <vector>

namespace bellows::train {

// Patterns are globs over dotted parameter names ("encoder.*", "*.bias", "layers.[0-3].*"), matched with
// fnmatch(3) without FNM_PATHNAME: `*` and `?` also match dots. Matching parameters get
// requires_grad(false) and their gradient reset. Returns the names frozen, in parameter order. A pattern
// that matches no parameter raises a kConfig error naming it and suggesting the closest parameter name (or
// "prefix.*" / "*.suffix" pattern); patterns are all checked before any parameter is frozen.
std::vector<std::string> freeze(const std::vector<std::pair<std::string, at::Tensor>>& params,
                                const std::vector<std::string>& patterns);

// fnmatch(pattern, name, 0) == 0.
bool glob_match(const std::string& pattern, const std::string& name);

}  // namespace bellows::train
