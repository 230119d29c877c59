// Small shared helpers: shape_of's text for tensors and size lists, percent_text, the host copy of a StateDict, and a
// module's parameters and buffers by name.
#include "bellows/util/format.h"

#include <ATen/ATen.h>
#include <gtest/gtest.h>
#include <torch/nn.h>

#include <vector>

#include "bellows/util/module_tensors.h"
#include "bellows/util/state_dict.h"

namespace bellows {
namespace {

TEST(Format, ShapeOf) {
  EXPECT_EQ(shape_of(at::zeros({2, 3})), "[2, 3]");
  EXPECT_EQ(shape_of(at::scalar_tensor(1.0)), "[]");
  EXPECT_EQ(shape_of(at::Tensor()), "(undefined)");
  EXPECT_EQ(shape_of(at::zeros({4, 5, 6}).sizes().slice(1)), "[5, 6]");
  EXPECT_EQ(shape_of(std::vector<std::int64_t>{7}), "[7]");
}

// A small share keeps two significant digits: a small model's MFU of 0.0079% read "0.0%" once.
TEST(Format, PercentText) {
  EXPECT_EQ(percent_text(0.421), "42.1%");
  EXPECT_EQ(percent_text(0.01), "1.0%");
  EXPECT_EQ(percent_text(7.9e-5), "0.0079%");
  EXPECT_EQ(percent_text(0.0), "0%");
}

TEST(StateDictHost, CopiesOrSharesContiguousHostTensors) {
  StateDict d;
  d["w"] = at::arange(6, at::kFloat).view({2, 3});
  d["t"] = at::arange(6, at::kFloat).view({2, 3}).t();  // not contiguous
  const StateDict copied = to_host(d);
  EXPECT_NE(copied.at("w").data_ptr(), d.at("w").data_ptr());
  EXPECT_TRUE(copied.at("t").is_contiguous());
  EXPECT_TRUE(copied.at("t").equal(d.at("t")));
  const StateDict shared = to_host(d, /*copy=*/false);
  EXPECT_EQ(shared.at("w").data_ptr(), d.at("w").data_ptr());
  EXPECT_TRUE(shared.at("t").is_contiguous());
}

TEST(ModuleTensors, ParametersThenBuffersByName) {
  torch::nn::Sequential model(torch::nn::Linear(3, 2), torch::nn::BatchNorm1d(2));
  std::vector<std::string> params, state;
  for (const auto& [name, t] : named_parameters(*model)) params.push_back(name);
  for (const auto& [name, t] : named_state(*model)) state.push_back(name);
  EXPECT_EQ(params, (std::vector<std::string>{"0.weight", "0.bias", "1.weight", "1.bias"}));
  ASSERT_EQ(state.size(), 7u);  // + running_mean, running_var, num_batches_tracked
  EXPECT_EQ(state[4], "1.running_mean");
}

}  // namespace
}  // namespace bellows
