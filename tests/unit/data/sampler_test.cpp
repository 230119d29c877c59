// Samplers: orders are permutations, seeded, sharded exactly like DistributedSampler, weighted by weight.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>

#include "bellows/data/sampler.h"
#include "bellows/util/error.h"

namespace bellows::data {
namespace {

using ::testing::HasSubstr;

SamplerOptions opts(std::string kind, std::uint64_t seed = 0, std::int64_t rank = 0, std::int64_t world = 1) {
  SamplerOptions o;
  o.kind = std::move(kind);
  o.seed = seed;
  o.rank = rank;
  o.world_size = world;
  return o;
}

TEST(Sampler, SequentialIsIdentity) {
  const auto idx = Sampler(5, opts("sequential")).indices(3);
  EXPECT_EQ(idx, (std::vector<std::int64_t>{0, 1, 2, 3, 4}));
}

TEST(Sampler, ShuffleIsAPermutationSeededBySeedAndEpoch) {
  const Sampler s(100, opts("shuffle", 7));
  auto e0 = s.indices(0);
  auto e1 = s.indices(1);
  EXPECT_EQ(e0, Sampler(100, opts("shuffle", 7)).indices(0));  // same seed, same epoch: same order
  EXPECT_NE(e0, e1);                                           // epochs differ
  EXPECT_NE(e0, Sampler(100, opts("shuffle", 8)).indices(0));  // seeds differ
  std::sort(e0.begin(), e0.end());
  std::vector<std::int64_t> all(100);
  std::iota(all.begin(), all.end(), 0);
  EXPECT_EQ(e0, all);
}

TEST(Sampler, ShardsCoverEverySampleOnceWhenDivisible) {
  std::vector<std::int64_t> seen;
  for (std::int64_t r = 0; r < 4; ++r) {
    const Sampler s(100, opts("shuffle", 3, r, 4));
    EXPECT_EQ(s.samples_per_epoch(), 25);
    const auto mine = s.indices(2);
    seen.insert(seen.end(), mine.begin(), mine.end());
  }
  std::sort(seen.begin(), seen.end());
  std::vector<std::int64_t> all(100);
  std::iota(all.begin(), all.end(), 0);
  EXPECT_EQ(seen, all);
}

TEST(Sampler, UnevenShardsPadByWrappingOrDrop) {
  // 10 samples on 3 ranks: padded to 12 (4 each) by repeating the order's first two samples.
  std::vector<std::int64_t> seen;
  const auto order = Sampler(10, opts("sequential")).indices(0);
  for (std::int64_t r = 0; r < 3; ++r) {
    const auto mine = Sampler(10, opts("sequential", 0, r, 3)).indices(0);
    ASSERT_EQ(mine.size(), 4u);
    seen.insert(seen.end(), mine.begin(), mine.end());
  }
  EXPECT_EQ(Sampler(10, opts("sequential", 0, 0, 3)).indices(0), (std::vector<std::int64_t>{0, 3, 6, 9}));
  EXPECT_EQ(Sampler(10, opts("sequential", 0, 1, 3)).indices(0), (std::vector<std::int64_t>{1, 4, 7, 0}));
  std::sort(seen.begin(), seen.end());
  EXPECT_EQ(seen, (std::vector<std::int64_t>{0, 0, 1, 1, 2, 3, 4, 5, 6, 7, 8, 9}));
  auto drop = opts("sequential", 0, 2, 3);
  drop.drop_uneven = true;
  EXPECT_EQ(Sampler(10, drop).indices(0), (std::vector<std::int64_t>{2, 5, 8}));
}

TEST(Sampler, WeightedNeverDrawsZeroWeightAndFavoursHeavySamples) {
  auto o = opts("weighted", 1);
  o.weights = {0.0, 1.0, 8.0, 1.0};
  o.num_samples = 1000;
  const auto idx = Sampler(4, o).indices(0);
  ASSERT_EQ(idx.size(), 1000u);
  std::vector<int> counts(4, 0);
  for (auto i : idx) ++counts[static_cast<std::size_t>(i)];
  EXPECT_EQ(counts[0], 0);
  EXPECT_GT(counts[2], 700);  // expected 800
  EXPECT_GT(counts[1], 50);   // expected 100
  EXPECT_EQ(idx, Sampler(4, o).indices(0));
}

TEST(Sampler, BadOptionsNameTheProblem) {
  auto expect_error = [](SamplerOptions o, std::int64_t n, const std::string& text) {
    try {
      Sampler s(n, o);
      ADD_FAILURE() << "no error for " << text;
    } catch (const Error& e) {
      EXPECT_THAT(e.message(), HasSubstr(text));
    }
  };
  expect_error(opts("random"), 10, "sampler 'random' is not known");
  expect_error(opts("shuffle", 0, 2, 2), 10, "rank 2 is outside [0, world_size 2)");
  auto w = opts("weighted");
  w.weights = {1.0, 2.0};
  expect_error(w, 3, "2 weights for 3 samples");
  w.weights = {1.0, -1.0, 0.0};
  expect_error(w, 3, "sample 1 has weight -1");
  w.weights = {0.0, 0.0, 0.0};
  expect_error(w, 3, "every sample weight is zero");
}

TEST(Sampler, StateIdentityIsChecked) {
  const Sampler a(100, opts("shuffle", 1));
  EXPECT_NO_THROW(Sampler(100, opts("shuffle", 1)).check_compatible(a.state_dict()));
  try {
    Sampler(100, opts("shuffle", 2)).check_compatible(a.state_dict());
    ADD_FAILURE() << "a different seed was accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kData);
    EXPECT_THAT(e.message(), HasSubstr("sampler seed = 1, this run has 2"));
  }
}

}  // namespace
}  // namespace bellows::data
