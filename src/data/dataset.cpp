// Dataset defaults and stage-time helpers; see dataset.h.
#include "bellows/data/dataset.h"

#include <chrono>

#include <fmt/format.h>

#include "bellows/data/collate.h"
#include "bellows/util/error.h"
#include "bellows/util/timer.h"  // defines: seconds_since

namespace bellows::data {

StageTimes& StageTimes::operator+=(const StageTimes& o) {
  read += o.read;
  decode += o.decode;
  transform += o.transform;
  collate += o.collate;
  copy += o.copy;
  return *this;
}

std::uint64_t mix_seed(std::uint64_t seed, std::uint64_t index) {
  // splitmix64 (Steele, Lea, Flood 2014) over seed and index: cheap, and nearby inputs give unrelated outputs.
  std::uint64_t z = seed + 0x9E3779B97F4A7C15ULL * (index + 1);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
  return z ^ (z >> 31);
}

Batch Dataset::get_batch(std::span<const std::int64_t> indices, FetchContext& context) const {
  std::vector<Example> examples;
  examples.reserve(indices.size());
  for (const std::int64_t i : indices) {
    try {
      examples.push_back(get(i, context));
    } catch (const Error& e) {
      throw Error(e.kind(), fmt::format("sample {}: {}", i, e.message()), e.hint());
    }
  }
  const auto start = std::chrono::steady_clock::now();
  Batch batch = collate(examples, CollateOptions{context.pad_value},
                        [&](std::size_t k) { return describe(indices[k]); });
  context.times.collate += seconds_since(start);
  return batch;
}

Batch first_sample(const Dataset& dataset) {
  FetchContext context;
  context.train = false;
  const std::int64_t first = 0;
  return dataset.get_batch(std::span<const std::int64_t>(&first, 1), context);
}

}  // namespace bellows::data
