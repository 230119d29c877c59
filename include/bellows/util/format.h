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

// A fraction as a percentage, "42.1%", with two significant digits below 1% ("0.0079%"), so that a small share
// (the MFU of a small model) does not read as "0.0%"; "0%" for 0.
std::string percent_text(double fraction);

}  // namespace bellows
