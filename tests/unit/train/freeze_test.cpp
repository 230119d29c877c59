// Freezing by glob pattern: which names each pattern form reaches, requires_grad switched off, and a pattern
// that matches nothing reported with the closest name or pattern, before anything is frozen.
#include "bellows/train/freeze.h"

#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include "bellows/util/error.h"

namespace bellows::train {
namespace {

using Named = std::vector<std::pair<std::string, at::Tensor>>;

Named make_freeze_params() {
  Named out;
  for (const char* name :
       {"encoder.embed.weight", "encoder.layers.0.attn.weight", "encoder.layers.0.attn.bias",
        "encoder.layers.3.mlp.weight", "encoder.layers.4.mlp.weight", "decoder.out.weight", "decoder.out.bias"}) {
    out.emplace_back(name, at::zeros({2}).requires_grad_(true));
  }
  return out;
}

std::vector<std::string> trainable(const Named& params) {
  std::vector<std::string> out;
  for (const auto& [n, t] : params) {
    if (t.requires_grad()) out.push_back(n);
  }
  return out;
}

TEST(Freeze, GlobMatching) {
  EXPECT_TRUE(glob_match("encoder.*", "encoder.layers.0.attn.weight")) << "* crosses dots";
  EXPECT_FALSE(glob_match("encoder.*", "decoder.out.weight"));
  EXPECT_TRUE(glob_match("*.bias", "decoder.out.bias"));
  EXPECT_TRUE(glob_match("encoder.layers.[0-3].*", "encoder.layers.3.mlp.weight"));
  EXPECT_FALSE(glob_match("encoder.layers.[0-3].*", "encoder.layers.4.mlp.weight"));
  EXPECT_TRUE(glob_match("decoder.out.?ias", "decoder.out.bias"));
  EXPECT_FALSE(glob_match("decoder.out", "decoder.out.bias")) << "a pattern matches whole names";
}

TEST(Freeze, FreezesMatchingParameters) {
  const Named params = make_freeze_params();
  at::Tensor(params[0].second).mutable_grad() = at::ones({2});
  const auto frozen = freeze(params, {"encoder.layers.[0-3].*", "*.bias", "encoder.embed.weight"});
  EXPECT_EQ(frozen, (std::vector<std::string>{"encoder.embed.weight", "encoder.layers.0.attn.weight",
                                              "encoder.layers.0.attn.bias", "encoder.layers.3.mlp.weight",
                                              "decoder.out.bias"}));
  EXPECT_EQ(trainable(params), (std::vector<std::string>{"encoder.layers.4.mlp.weight", "decoder.out.weight"}));
  EXPECT_FALSE(params[0].second.grad().defined()) << "a frozen parameter holds no gradient";
  EXPECT_TRUE(freeze(params, {}).empty());
}

void expect_no_match(const std::string& pattern, const std::string& suggestion) {
  const Named params = make_freeze_params();
  try {
    freeze(params, {"decoder.*", pattern});
    ADD_FAILURE() << "no error for " << pattern;
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kConfig);
    EXPECT_NE(e.message().find("'" + pattern + "'"), std::string::npos) << e.message();
    EXPECT_NE(e.hint().find(suggestion), std::string::npos) << e.hint();
  }
  EXPECT_EQ(trainable(params).size(), params.size()) << "nothing frozen when a pattern is wrong";
}

TEST(Freeze, PatternMatchingNothingSuggestsClosest) {
  expect_no_match("decoder.out.wieght", "did you mean 'decoder.out.weight'");  // a misspelt name
  expect_no_match("encodr.*", "did you mean 'encoder.*'");                     // a misspelt prefix
  expect_no_match("*.bais", "did you mean '*.bias' (matches 'encoder.layers.0.attn.bias'");
  expect_no_match("totally_unrelated_name", "parameters are named like 'encoder.embed.weight'");
}

}  // namespace
}  // namespace bellows::train
