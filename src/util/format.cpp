// Text forms for messages; see format.h.
#include "bellows/util/format.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <cmath>

namespace bellows {

std::string shape_of(at::IntArrayRef sizes) {
  return fmt::format("[{}]", fmt::join(sizes, ", "));
}

std::string shape_of(const at::Tensor& t) {
  return t.defined() ? shape_of(t.sizes()) : std::string("(undefined)");
}

std::string percent_text(double fraction) {
  const double pct = 100 * fraction;
  if (pct == 0) return "0%";
  return std::fabs(pct) >= 1 ? fmt::format("{:.1f}%", pct) : fmt::format("{:.2g}%", pct);
}

}  // namespace bellows
