// Batch helpers; see batch.h.
#include "bellows/data/batch.h"

#include <fmt/format.h>

#include "bellows/util/check.h"

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

}  // namespace bellows::data
