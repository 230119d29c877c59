// Small text forms used in messages across bellows, written once so that every message shows them alike.
//   BELLOWS_CHECK_DATA(x.dim() == 2, fmt::format("x has shape {}; expected [N, F]", shape_of(x)), "...");
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/util/ArrayRef.h>

#include <string>

namespace bellows {

// "[2, 3]"; "[]" for a 0-dim tensor; "(undefined)" for an undefined tensor.
std::string shape_of(const at::Tensor& t);
std::string shape_of(at::IntArrayRef sizes);

}  // namespace bellows
