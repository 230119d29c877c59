// Text forms for messages; see format.h.
#include "bellows/util/format.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

namespace bellows {

std::string shape_of(at::IntArrayRef sizes) {
  return fmt::format("[{}]", fmt::join(sizes, ", "));
}

std::string shape_of(const at::Tensor& t) {
  return t.defined() ? shape_of(t.sizes()) : std::string("(undefined)");
}

}  // namespace bellows
