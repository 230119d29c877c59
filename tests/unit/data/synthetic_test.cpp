// The synthetic source's kinds (data/synthetic.h): the shapes each model reads, the same data for a seed, targets
// that follow the documented rule (so a model can learn them), and the facts (a vocabulary, a grid) that reach the
// model through build_datasets and, without data, from the config alone.
#include "bellows/data/synthetic.h"

#include <ATen/ATen.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "bellows/data/build.h"
#include "data/data_config.h"
#include "test_util.h"

namespace bellows::data {
namespace {

using test_support::data_config;
using test_support::error_from;
using ::testing::HasSubstr;

SyntheticOptions options(const std::string& kind, std::int64_t samples = 64) {
  SyntheticOptions o;
  o.kind = kind;
  o.samples = samples;
  return o;
}

TEST(Synthetic, EveryKindIsTheSameForASeedAndAnotherForAnother) {
  for (const std::string& kind : synthetic_kinds()) {
    SyntheticOptions o = options(kind);
    const auto a = make_synthetic(o), b = make_synthetic(o);
    o.seed = 1;
    const auto other = make_synthetic(o);
    ASSERT_EQ(a.size(), b.size()) << kind;
    for (const auto& [name, t] : a) {
      EXPECT_TRUE(at::equal(t, b.at(name))) << kind << " " << name;
      EXPECT_EQ(t.size(0), 64) << kind << " " << name;
    }
    EXPECT_FALSE(at::equal(a.at("x"), other.at("x"))) << kind;
  }
}

TEST(Synthetic, TablesAndSequencesHaveTheirShapes) {
  SyntheticOptions o = options("regression");
  o.features = 7;
  o.targets = 5;
  auto t = make_synthetic(o);
  EXPECT_EQ(t.at("x").sizes(), at::IntArrayRef({64, 7}));
  EXPECT_EQ(t.at("y").sizes(), at::IntArrayRef({64, 5}));
  o = options("sequences", 512);
  o.steps = 12;
  o.features = 3;
  t = make_synthetic(o);
  EXPECT_EQ(t.at("x").sizes(), at::IntArrayRef({512, 12, 3}));
  EXPECT_EQ(t.at("y").sizes(), at::IntArrayRef({512, 1}));
  // Targets of about unit scale, whatever the length (the step weights have unit sum of squares).
  const double sd = t.at("y").std().item<double>();
  EXPECT_GT(sd, 0.2);
  EXPECT_LT(sd, 2.0);
}

TEST(Synthetic, ImagesAreTheirClassTemplateUnderNoise) {
  const SyntheticOptions o{.kind = "images", .samples = 2000, .classes = 4, .channels = 2, .side = 8};
  const auto t = make_synthetic(o);
  const at::Tensor x = t.at("x"), y = t.at("y");
  EXPECT_EQ(x.sizes(), at::IntArrayRef({2000, 2, 8, 8}));
  EXPECT_EQ(y.scalar_type(), at::kLong);
  EXPECT_EQ(y.min().item<std::int64_t>(), 0);
  EXPECT_EQ(y.max().item<std::int64_t>(), 3);
  // The nearest class mean recovers the label: the classes are there to be learnt.
  std::vector<at::Tensor> means;
  for (std::int64_t k = 0; k < 4; ++k)
    means.push_back(x.index_select(0, at::nonzero(y == k).squeeze(1)).mean(0).flatten());
  const at::Tensor distances = at::cdist(x.flatten(1), at::stack(means));
  EXPECT_GT(distances.argmin(1).eq(y).to(at::kFloat).mean().item<double>(), 0.9);
}

TEST(Synthetic, PairsRelateTheirSentencesByTheLabel) {
  SyntheticOptions o{.kind = "pairs", .samples = 300, .classes = 3, .steps = 5, .vocab_size = 20};
  const auto t = make_synthetic(o);
  const at::Tensor x = t.at("x"), y = t.at("y"), segments = t.at("segments");
  ASSERT_EQ(x.sizes(), at::IntArrayRef({300, 13}));  // [CLS] 5 [SEP] 5 [SEP]
  EXPECT_TRUE(at::equal(x.select(1, 0), at::full({300}, 1, at::kLong)));
  EXPECT_TRUE(at::equal(x.select(1, 6), at::full({300}, 2, at::kLong)));
  EXPECT_TRUE(at::equal(x.select(1, 12), at::full({300}, 2, at::kLong)));
  const at::Tensor premise = x.slice(1, 1, 6), hypothesis = x.slice(1, 7, 12);
  EXPECT_GE(at::cat({premise, hypothesis}).min().item<std::int64_t>(), 3);  // words, never a special id
  EXPECT_LT(at::cat({premise, hypothesis}).max().item<std::int64_t>(), 20);
  // One group per sentence; the hypothesis's is the premise's plus the label; every label with every premise group.
  const at::Tensor p_group = (premise - 3).remainder(3), h_group = (hypothesis - 3).remainder(3);
  EXPECT_TRUE(at::equal(p_group, p_group.select(1, 0).unsqueeze(1).expand_as(p_group)));
  EXPECT_TRUE(at::equal(h_group, h_group.select(1, 0).unsqueeze(1).expand_as(h_group)));
  EXPECT_TRUE(at::equal(h_group.select(1, 0), (p_group.select(1, 0) + y).remainder(3)));
  EXPECT_EQ(std::get<0>(at::_unique(p_group.select(1, 0) * 3 + y)).numel(), 9);
  EXPECT_EQ(segments.slice(1, 0, 7).sum().item<std::int64_t>(), 0);
  EXPECT_EQ(segments.slice(1, 7, 13).min().item<std::int64_t>(), 1);
  const DataFacts f = synthetic_facts(o);
  ASSERT_TRUE(f.text);
  EXPECT_EQ(f.text->vocab_size, 20);
  EXPECT_EQ(f.text->num_classes, 3);
  EXPECT_EQ(f.text->pad_id, 0);
  EXPECT_EQ(f.text->max_len, 13);
  // Fewer words than classes: a class without a group of words.
  o.vocab_size = 5;
  const Error e = error_from([&] { make_synthetic(o); });
  EXPECT_EQ(e.kind(), ErrorKind::kConfig);
  EXPECT_THAT(e.hint(), HasSubstr("data.vocab_size to at least 6"));
}

TEST(Synthetic, GridFieldsMoveEastOneStep) {
  SyntheticOptions o = options("grid");
  o.channels = 2;
  o.side = 6;
  const auto t = make_synthetic(o);
  const at::Tensor x = t.at("x"), y = t.at("y");
  EXPECT_EQ(x.sizes(), at::IntArrayRef({64, 2, 6, 6}));
  EXPECT_TRUE(at::allclose(y, at::roll(x, {1}, {3}) + 0.1 * (at::roll(x, {-1}, {1}) - x)));
  const DataFacts f = synthetic_facts(o);
  ASSERT_TRUE(f.grid);
  EXPECT_EQ(f.grid->lat.size(), 6u);
  EXPECT_DOUBLE_EQ(f.grid->lat.front(), 40.0);
  EXPECT_DOUBLE_EQ(f.grid->lat.back(), 50.0);
  EXPECT_EQ(f.grid->input_channels, (std::vector<std::string>{"c0", "c1"}));
  EXPECT_EQ(f.grid->target_channels, f.grid->input_channels);
  EXPECT_FALSE(synthetic_facts(options("regression")).grid);
}

TEST(Synthetic, TheSourceHandsItsFactsToTheModelWithAndWithoutData) {
  const config::Config c =
      data_config("data:\n  source: synthetic\n  kind: grid\n  samples: 20\n  side: 5\n  channels: 4\n");
  const DataSplits splits = build_datasets(c, 0);
  ASSERT_TRUE(splits.facts.grid);
  EXPECT_EQ(splits.facts.grid->lon.size(), 5u);
  EXPECT_EQ(splits.facts.grid->input_channels.size(), 4u);
  EXPECT_THAT(splits.train->name() + splits.facts.source, HasSubstr("synthetic grid (20 samples, 4 x 5 x 5)"));
  const DataFacts without = facts_without_data(c);
  ASSERT_TRUE(without.grid);
  EXPECT_EQ(without.grid->lat, splits.facts.grid->lat);
  const config::Config pairs =
      data_config("data:\n  source: synthetic\n  kind: pairs\n  samples: 20\n  steps: 4\n  classes: 2\n");
  ASSERT_TRUE(build_datasets(pairs, 0).facts.text);
  EXPECT_EQ(build_datasets(pairs, 0).facts.text->max_len, 11);
}

}  // namespace
}  // namespace bellows::data
