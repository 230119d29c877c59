// Which samples an epoch visits, in which order, on this rank. Sequential, shuffled (a permutation seeded by
// seed and epoch) or weighted (drawn by weight, with replacement); sharded by rank for data parallel training
// the way torch's DistributedSampler does it: the epoch's order is padded by wrapping around to a multiple
// of world_size, and rank r takes positions r, r + world_size, ... (`drop_uneven` trims instead of padding,
// `uneven` does neither: every sample once, for evaluation).
// An epoch's order is a pure function of (options, dataset size, epoch): the RNG state of an epoch is its
// seed, so a position saved as (epoch, index) resumes on exactly the next sample.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "bellows/util/state_dict.h"  // defines: StateDict

namespace bellows::data {

struct SamplerOptions {
  std::string kind = "shuffle";       // sequential | shuffle | weighted
  std::uint64_t seed = 0;
  std::vector<double> weights;        // weighted: one non-negative weight per sample
  std::int64_t num_samples = 0;       // weighted: draws per epoch (0: dataset size)
  std::int64_t rank = 0;
  std::int64_t world_size = 1;
  bool drop_uneven = false;           // sharding: drop the tail instead of padding by wrap-around
  bool uneven = false;                // sharding: neither pad nor drop, ranks may differ by one sample (evaluation)
};

class Sampler {
 public:
  // kConfig errors for an unknown kind, rank outside [0, world_size), weights of the wrong length, negative
  // or all zero.
  Sampler(std::int64_t dataset_size, SamplerOptions options);

  // This rank's sample indices for `epoch`, in order.
  std::vector<std::int64_t> indices(std::int64_t epoch) const;
  std::int64_t samples_per_epoch() const;  // on this rank
  const SamplerOptions& options() const { return options_; }
  std::int64_t dataset_size() const { return n_; }

  // The identity of the order (kind, seed, sizes, rank): a saved position only means something under the same
  // identity, and load checks it.
  StateDict state_dict() const;
  void check_compatible(const StateDict& state) const;  // kData error naming the differing field

 private:
  std::int64_t n_;
  SamplerOptions options_;
};

}  // namespace bellows::data
