// Samplers; see sampler.h.
#include "bellows/data/sampler.h"

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <fmt/format.h>

#include "bellows/data/dataset.h"
#include "bellows/util/check.h"

namespace bellows::data {

Sampler::Sampler(std::int64_t dataset_size, SamplerOptions options) : n_(dataset_size), options_(std::move(options)) {
  const auto& o = options_;
  BELLOWS_CHECK_CONFIG(o.kind == "sequential" || o.kind == "shuffle" || o.kind == "weighted",
                       fmt::format("sampler '{}' is not known", o.kind), "use sequential, shuffle or weighted");
  BELLOWS_CHECK_CONFIG(o.world_size >= 1 && o.rank >= 0 && o.rank < o.world_size,
                       fmt::format("rank {} is outside [0, world_size {})", o.rank, o.world_size),
                       "check the launcher's RANK and WORLD_SIZE");
  BELLOWS_CHECK_DATA(n_ >= 1, "the dataset is empty", "check the data path and filters");
  if (o.kind == "weighted") {
    BELLOWS_CHECK_CONFIG(static_cast<std::int64_t>(o.weights.size()) == n_,
                         fmt::format("the weighted sampler has {} weights for {} samples", o.weights.size(), n_),
                         "give one weight per sample");
    double total = 0;
    for (std::size_t i = 0; i < o.weights.size(); ++i) {
      BELLOWS_CHECK_CONFIG(o.weights[i] >= 0 && std::isfinite(o.weights[i]),
                           fmt::format("sample {} has weight {}; weights must be finite and >= 0", i, o.weights[i]),
                           "fix the weight column");
      total += o.weights[i];
    }
    BELLOWS_CHECK_CONFIG(total > 0, "every sample weight is zero", "give at least one sample a positive weight");
    BELLOWS_CHECK_CONFIG(o.num_samples >= 0, fmt::format("num_samples is {}", o.num_samples), "use 0 (dataset size) or more");
  }
  BELLOWS_CHECK_DATA(samples_per_epoch() >= 1 || o.uneven,
                     fmt::format("{} samples leave nothing for rank {} of {} with drop_uneven", n_, o.rank, o.world_size),
                     "use more data, fewer ranks, or padding (drop_uneven: false)");
}

std::int64_t Sampler::samples_per_epoch() const {
  const std::int64_t total = options_.kind == "weighted" && options_.num_samples > 0 ? options_.num_samples : n_;
  const std::int64_t w = options_.world_size;
  if (options_.uneven) return (total - options_.rank + w - 1) / w;  // positions rank, rank + w, ... below total
  return options_.drop_uneven ? total / w : (total + w - 1) / w;
}

std::vector<std::int64_t> Sampler::indices(std::int64_t epoch) const {
  const auto gen = at::make_generator<at::CPUGeneratorImpl>(mix_seed(options_.seed, static_cast<std::uint64_t>(epoch)));
  at::Tensor order;
  if (options_.kind == "shuffle") {
    order = at::randperm(n_, gen, at::TensorOptions().dtype(at::kLong));
  } else if (options_.kind == "weighted") {
    const std::int64_t draws = options_.num_samples > 0 ? options_.num_samples : n_;
    const at::Tensor w = at::tensor(options_.weights, at::kDouble);
    order = at::multinomial(w, draws, /*replacement=*/true, gen);
  } else {
    order = at::arange(n_, at::TensorOptions().dtype(at::kLong));
  }
  const std::int64_t total = order.size(0);
  const std::int64_t w = options_.world_size;
  const std::int64_t per_rank = samples_per_epoch();
  const auto* all = order.data_ptr<std::int64_t>();
  std::vector<std::int64_t> mine;
  mine.reserve(per_rank);
  // Position p of the padded order is all[p % total]: padding repeats the epoch's first samples.
  for (std::int64_t k = 0; k < per_rank; ++k) mine.push_back(all[(options_.rank + k * w) % total]);
  return mine;
}

StateDict Sampler::state_dict() const {
  StateDict s;
  put_int(s, "seed", static_cast<std::int64_t>(options_.seed));
  put_int(s, "dataset_size", n_);
  put_int(s, "rank", options_.rank);
  put_int(s, "world_size", options_.world_size);
  put_int(s, "kind", options_.kind == "sequential" ? 0 : options_.kind == "shuffle" ? 1 : 2);
  return s;
}

void Sampler::check_compatible(const StateDict& state) const {
  const StateDict mine = state_dict();
  for (const auto& [key, value] : mine) {
    // Ranks of one world step in lockstep: a position saved by rank 0 is every rank's position.
    if (key == "rank") continue;
    // Another world size: the position still counts batches of this rank's epoch; the loader rescales it, and the
    // run says that the data order differs from the uninterrupted run's.
    if (key == "world_size") continue;
    const std::int64_t saved = get_int(state, key);
    const std::int64_t now = value.item<std::int64_t>();
    BELLOWS_CHECK_DATA(saved == now,
                       fmt::format("the saved data position has sampler {} = {}, this run has {}", key, saved, now),
                       "resume with the same data, seed, sampler and world size, or start a new run");
  }
}

}  // namespace bellows::data
