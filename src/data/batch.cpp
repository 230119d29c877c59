// Batch helpers; see batch.h.
#include "bellows/data/batch.h"

#include <fmt/format.h>

#include <algorithm>

#include "bellows/util/check.h"
#include "bellows/util/format.h"  // defines: shape_of

namespace bellows::data {

const at::Tensor& Batch::at(const std::string& name) const {
  auto it = tensors.find(name);
  if (it == tensors.end()) {
    std::string names;
    for (const auto& [k, v] : tensors) names += (names.empty() ? "" : ", ") + k;
    BELLOWS_FAIL(ErrorKind::kData, fmt::format("batch has no tensor '{}' (has: {})", name, names),
                 "the task and the data source disagree on tensor names; check the data config's column names");
  }
  return it->second;
}

Batch Batch::to(c10::Device device, bool non_blocking) const {
  Batch out;
  out.size = size;
  for (const auto& [name, t] : tensors) out.tensors.emplace(name, t.to(device, non_blocking));
  return out;
}

std::string Batch::unsplittable() const {
  for (const auto& [name, t] : tensors) {
    if (t.dim() == 0 || t.size(0) != size) return fmt::format("its tensor '{}' has shape {}, not the {} samples first", name, shape_of(t), size);
  }
  return "";
}

std::string Batch::shapes() const {
  std::string text;
  for (const auto& [name, t] : tensors) {
    text += fmt::format("{}{} {}", text.empty() ? "" : ", ", name, t.defined() ? fmt::format("{} {}", c10::toString(t.scalar_type()), shape_of(t)) : "(undefined)");
  }
  return text;
}

Batch Batch::slice(std::int64_t start, std::int64_t count) const {
  BELLOWS_CHECK(start >= 0 && count >= 0 && start + count <= size,
                fmt::format("samples {}..{} of a batch of {}", start, start + count, size), "report this bug");
  const std::string why = unsplittable();
  BELLOWS_CHECK_DATA(why.empty(), "the batch cannot be split into smaller batches: " + why,
                     "every tensor of a batch needs the samples as its first dimension");
  Batch out;
  out.size = count;
  for (const auto& [name, t] : tensors) out.tensors.emplace(name, t.narrow(0, start, count));
  return out;
}

std::vector<std::int64_t> split_sizes(std::int64_t size, std::int64_t parts) {
  const std::int64_t n = std::max<std::int64_t>(std::min(size, parts), 1);
  std::vector<std::int64_t> sizes(static_cast<std::size_t>(n), size / n);
  for (std::int64_t i = 0; i < size % n; ++i) ++sizes[static_cast<std::size_t>(i)];
  return sizes;
}

}  // namespace bellows::data
