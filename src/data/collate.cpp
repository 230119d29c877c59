// Collation; see collate.h.
#include "bellows/data/collate.h"

#include <ATen/ATen.h>
#include <fmt/format.h>
#include <fmt/ranges.h>

#include "bellows/util/check.h"
#include "bellows/util/format.h"  // defines: shape_of

namespace bellows::data {

namespace {

std::string sample_name(const std::function<std::string(std::size_t)>& describe, std::size_t i) {
  return describe ? describe(i) : fmt::format("sample {} of the batch", i);
}

}  // namespace

Batch collate(const std::vector<Example>& examples, const CollateOptions& options,
              const std::function<std::string(std::size_t)>& describe) {
  BELLOWS_CHECK(!examples.empty(), "collate() of no samples", "report this bug");
  Batch batch;
  batch.size = static_cast<std::int64_t>(examples.size());
  const Example& first = examples.front();
  for (const auto& [name, t0] : first) {
    std::vector<at::Tensor> parts;
    parts.reserve(examples.size());
    bool ragged = false;
    std::int64_t longest = t0.dim() > 0 ? t0.size(0) : 0;
    for (std::size_t i = 0; i < examples.size(); ++i) {
      auto it = examples[i].find(name);
      BELLOWS_CHECK_DATA(it != examples[i].end() && examples[i].size() == first.size(),
                         fmt::format("{} has different tensors than {} (missing or extra '{}')", sample_name(describe, i),
                                     sample_name(describe, 0), name),
                         "every sample of a dataset must carry the same named tensors");
      const at::Tensor& t = it->second;
      const bool same_rest = t.dim() == t0.dim() && t.dim() > 0 && t.sizes().slice(1) == t0.sizes().slice(1);
      BELLOWS_CHECK_DATA(t.sizes() == t0.sizes() || same_rest,
                         fmt::format("tensor '{}' of {} has shape {}, but {} has {}", name, sample_name(describe, i), shape_of(t),
                                     sample_name(describe, 0), shape_of(t0)),
                         "samples may differ only in their first (sequence) dimension, which is padded");
      BELLOWS_CHECK_DATA(t.scalar_type() == t0.scalar_type(),
                         fmt::format("tensor '{}' of {} is {}, but {} has {}", name, sample_name(describe, i), c10::toString(t.scalar_type()),
                                     sample_name(describe, 0), c10::toString(t0.scalar_type())),
                         "give every sample the same dtype");
      if (t.sizes() != t0.sizes()) ragged = true;
      if (t.dim() > 0) longest = std::max(longest, t.size(0));
      parts.push_back(t);
    }
    if (!ragged) {
      batch.tensors.emplace(name, at::stack(parts));
      continue;
    }
    // Variable-length: pad along the first dimension, and say which positions are real.
    std::vector<std::int64_t> padded_shape{batch.size, longest};
    for (std::int64_t d = 1; d < t0.dim(); ++d) padded_shape.push_back(t0.size(d));
    at::Tensor out = at::full(padded_shape, options.pad_value, t0.options());
    at::Tensor lengths = at::empty({batch.size}, at::kLong);
    auto len = lengths.accessor<std::int64_t, 1>();
    for (std::int64_t i = 0; i < batch.size; ++i) {
      len[i] = parts[i].size(0);
      out[i].narrow(0, 0, len[i]).copy_(parts[i]);
    }
    const at::Tensor mask = at::arange(longest, at::kLong).unsqueeze(0) < lengths.unsqueeze(1);
    batch.tensors.emplace(name, out);
    batch.tensors.emplace(name + "_mask", mask);
    batch.tensors.emplace(name + "_lengths", lengths);
  }
  return batch;
}

}  // namespace bellows::data
