// The Transformer encoder and the sequence model "transformer": shapes, float64 gradients against central
// differences, the attention against a hand-written softmax(QK^T/sqrt(d))V with the same mask, invariance to
// padded values, sinusoidal positions, max_len and data-shape errors, learning a synthetic task through the
// registered model's task, and activation checkpointing (identical gradients, selected block names).
#include "bellows/models/transformer.h"

#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <torch/csrc/autograd/autograd.h>
#include <torch/optim/adam.h>
#include <torch/utils.h>

#include <cmath>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "bellows/config/schema.h"
#include "bellows/data/window.h"
#include "bellows/models/activation_checkpoint.h"
#include "bellows/models/registry.h"
#include "bellows/models/rnn.h"
#include "bellows/util/error.h"
#include "model_test_util.h"
#include "test_util.h"

namespace bellows::models {
namespace {

using test_support::build_model;
using test_support::error_from;
using test_support::expect_gradients_match;
using test_support::OneThread;
using test_support::tiny_encoder;
using test_support::train_tail_loss;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

TransformerModelOptions tiny_model(const std::string& pooling = "mean", double dropout = 0.0) {
  TransformerModelOptions o;
  o.in_features = 3;
  o.out_features = 2;
  o.pooling = pooling;
  o.encoder = tiny_encoder(2, dropout);
  return o;
}

TEST(TransformerEncoder, OutputShapes) {
  TransformerEncoderOptions o;
  o.d_model = 16;
  o.heads = 4;
  o.layers = 2;
  o.ff = 32;
  TransformerEncoder encoder(o);
  EXPECT_EQ(encoder->forward(at::randn({2, 5, 16})).sizes(), (std::vector<std::int64_t>{2, 5, 16}));
  EXPECT_THAT(encoder->checkpoint_blocks(), ElementsAre("layers.0", "layers.1"));
  for (const std::string pooling : {"mean", "last", "cls"}) {
    TransformerModel model(tiny_model(pooling));
    const at::Tensor lengths = at::tensor(std::vector<std::int64_t>{7, 2, 5}, at::kLong);
    EXPECT_EQ(model->forward(at::randn({3, 7, 3}), lengths).sizes(), (std::vector<std::int64_t>{3, 2})) << pooling;
    EXPECT_EQ(model->forward(at::randn({3, 7, 3})).sizes(), (std::vector<std::int64_t>{3, 2})) << pooling;
  }
  // PyTorch's nn.TransformerEncoder names, so its norm_first layers load the same weights.
  std::vector<std::string> names;
  for (const auto& p : TransformerModel(tiny_model())->named_parameters()) names.push_back(p.key());
  EXPECT_THAT(names,
              ::testing::IsSupersetOf({"input.weight", "encoder.layers.0.self_attn.in_proj_weight",
                                       "encoder.layers.0.self_attn.in_proj_bias",
                                       "encoder.layers.1.self_attn.out_proj.weight", "encoder.layers.0.linear1.weight",
                                       "encoder.layers.0.linear2.bias", "encoder.layers.0.norm1.weight",
                                       "encoder.layers.1.norm2.bias", "encoder.norm.weight", "head.weight"}));
}

TEST(TransformerModel, GradientsMatchFiniteDifferencesFloat64) {
  const OneThread one_thread;
  torch::manual_seed(3);
  for (const std::string pooling : {"mean", "last", "cls"}) {
    auto o = tiny_model(pooling);
    o.encoder.positions = pooling == "cls" ? "learned" : "sinusoidal";
    o.encoder.activation = pooling == "last" ? "relu" : "gelu";  // relu runs in place on the linear output
    TransformerModel model(o);
    model->to(at::kDouble);
    model->eval();
    const at::Tensor x = at::randn({2, 5, 3}, at::kDouble).requires_grad_(true);
    const at::Tensor lengths = at::tensor(std::vector<std::int64_t>{5, 3}, at::kLong);
    const at::Tensor w = at::randn({2, 2}, at::kDouble);
    auto f = [&] { return (model->forward(x, lengths) * w).sum(); };
    std::vector<at::Tensor> tensors{x};
    for (const auto& p : model->parameters()) tensors.push_back(p);
    SCOPED_TRACE(pooling);
    expect_gradients_match(f, tensors, 3);
  }
}

TEST(TransformerEncoderLayer, AttentionEqualsHandWrittenSoftmaxWithTheSameMask) {
  torch::manual_seed(5);
  TransformerEncoderOptions o;
  o.d_model = 8;
  o.heads = 2;
  o.ff = 12;
  o.dropout = 0.0;
  TransformerEncoderLayer layer(o);
  layer->to(at::kDouble);
  const at::Tensor x = at::randn({3, 6, 8}, at::kDouble);
  const at::Tensor padding = at::arange(6).unsqueeze(0) >= at::tensor(std::vector<std::int64_t>{6, 4, 1}).unsqueeze(1);
  const at::Tensor out = layer->forward(x, attention_mask_from_padding(padding));

  auto p = layer->named_parameters();
  const std::int64_t heads = 2, dh = 4;
  const at::Tensor n1 = at::layer_norm(x, {8}, p["norm1.weight"], p["norm1.bias"], 1e-5);
  const auto qkv = at::linear(n1, p["self_attn.in_proj_weight"], p["self_attn.in_proj_bias"]).chunk(3, -1);
  auto split = [&](const at::Tensor& t) { return t.reshape({3, 6, heads, dh}).transpose(1, 2); };  // [B, h, T, dh]
  at::Tensor scores = split(qkv[0]).matmul(split(qkv[1]).transpose(-2, -1)) / std::sqrt(double(dh));
  scores = scores.masked_fill(padding.view({3, 1, 1, 6}), -INFINITY);
  const at::Tensor attention = scores.softmax(-1).matmul(split(qkv[2])).transpose(1, 2).reshape({3, 6, 8});
  const at::Tensor h1 = x + at::linear(attention, p["self_attn.out_proj.weight"], p["self_attn.out_proj.bias"]);
  const at::Tensor n2 = at::layer_norm(h1, {8}, p["norm2.weight"], p["norm2.bias"], 1e-5);
  const at::Tensor expected = h1 + at::linear(at::gelu(at::linear(n2, p["linear1.weight"], p["linear1.bias"])),
                                              p["linear2.weight"], p["linear2.bias"]);
  EXPECT_TRUE(at::allclose(out, expected, 1e-12, 1e-12)) << (out - expected).abs().max().item<double>();
}

TEST(TransformerEncoder, FullyPaddedSequenceStaysFinite) {
  TransformerEncoder encoder(tiny_encoder());
  encoder->eval();
  at::Tensor padding = at::zeros({2, 5}, at::kBool);
  padding[1].fill_(true);  // sequence 1 is padding throughout
  const at::Tensor out = encoder->forward(at::randn({2, 5, 8}), padding);
  EXPECT_TRUE(out.isfinite().all().item<bool>());
  // The attention mask lets such a row attend everywhere and leaves the others as they are.
  const at::Tensor attend = attention_mask_from_padding(padding);
  EXPECT_TRUE(attend[1].all().item<bool>());
  EXPECT_TRUE(attend[0].all().item<bool>());
}

TEST(TransformerModel, ValuesAtPaddedPositionsChangeNothing) {
  torch::manual_seed(7);
  for (const std::string pooling : {"mean", "last", "cls"}) {
    TransformerModel model(tiny_model(pooling));
    model->eval();
    const at::Tensor lengths = at::tensor(std::vector<std::int64_t>{8, 5, 1, 3}, at::kLong);
    const at::Tensor padded = (at::arange(8).unsqueeze(0) >= lengths.unsqueeze(1)).unsqueeze(2);  // [B, T, 1]
    const at::Tensor x = at::randn({4, 8, 3});
    const at::Tensor other = at::where(padded, at::randn({4, 8, 3}) * 100, x);
    EXPECT_FALSE(at::equal(x, other));
    const at::Tensor a = model->forward(x, lengths), b = model->forward(other, lengths);
    EXPECT_TRUE(at::allclose(a, b, 0, 1e-6)) << pooling << ": " << (a - b).abs().max().item<float>();
    // Without lengths the padded values do count: the invariance above comes from the mask.
    EXPECT_FALSE(at::allclose(model->forward(x), model->forward(other), 0, 1e-3)) << pooling;
  }
  // The encoder's outputs at valid positions, too.
  TransformerEncoder encoder(tiny_encoder());
  encoder->eval();
  const at::Tensor padding = at::arange(6).unsqueeze(0) >= at::tensor(std::vector<std::int64_t>{6, 2}).unsqueeze(1);
  const at::Tensor x = at::randn({2, 6, 8});
  const at::Tensor other = at::where(padding.unsqueeze(2), at::randn({2, 6, 8}) * 100, x);
  const at::Tensor valid = padding.logical_not();
  const at::Tensor a = encoder->forward(x, padding).index({valid}), b = encoder->forward(other, padding).index({valid});
  EXPECT_EQ(a.size(0), 8);
  EXPECT_TRUE(at::allclose(a, b, 0, 1e-6)) << (a - b).abs().max().item<float>();
}

TEST(TransformerEncoder, SinusoidalPositionsAtKnownPositions) {
  const at::Tensor pe = sinusoidal_positions(4, 6);
  ASSERT_EQ(pe.sizes(), (std::vector<std::int64_t>{4, 6}));
  const std::vector<double> row0{0, 1, 0, 1, 0, 1};
  for (int c = 0; c < 6; ++c) EXPECT_DOUBLE_EQ(pe[0][c].item<double>(), row0[c]) << c;
  // Column 2i: sin(p / 10000^(2i/6)); column 2i+1: cos of the same.
  EXPECT_NEAR(pe[1][0].item<double>(), std::sin(1.0), 1e-15);
  EXPECT_NEAR(pe[1][1].item<double>(), std::cos(1.0), 1e-15);
  EXPECT_NEAR(pe[1][2].item<double>(), std::sin(1.0 / std::pow(10000.0, 2.0 / 6)), 1e-15);
  EXPECT_NEAR(pe[2][3].item<double>(), std::cos(2.0 / std::pow(10000.0, 2.0 / 6)), 1e-15);
  EXPECT_NEAR(pe[3][4].item<double>(), std::sin(3.0 / std::pow(10000.0, 4.0 / 6)), 1e-15);
  EXPECT_NEAR(pe[3][5].item<double>(), std::cos(3.0 / std::pow(10000.0, 4.0 / 6)), 1e-15);

  // The encoder adds them: with positions, the same vector at every step gives different outputs per step.
  TransformerEncoderOptions o;
  o.d_model = 6;
  o.heads = 2;
  o.layers = 1;
  o.ff = 8;
  o.dropout = 0;
  const at::Tensor same = at::randn({1, 1, 6}).expand({1, 4, 6});
  TransformerEncoder with(o);
  EXPECT_FALSE(at::allclose(with->forward(same)[0][0], with->forward(same)[0][3]));
  o.positions = "none";
  TransformerEncoder without(o);
  EXPECT_TRUE(at::allclose(without->forward(same)[0][0], without->forward(same)[0][3], 1e-5, 1e-6));
}

TEST(TransformerEncoder, SequenceLongerThanMaxLenIsAnErrorNamingBoth) {
  for (const std::string positions : {"sinusoidal", "learned"}) {
    TransformerEncoderOptions o;
    o.d_model = 8;
    o.heads = 2;
    o.layers = 1;
    o.ff = 8;
    o.max_len = 10;
    o.positions = positions;
    TransformerEncoder encoder(o);
    EXPECT_EQ(encoder->forward(at::randn({1, 10, 8})).size(1), 10);
    const Error e = error_from([&] { encoder->forward(at::randn({1, 11, 8})); });
    EXPECT_EQ(e.kind(), ErrorKind::kData);
    EXPECT_THAT(e.message(), HasSubstr("11 steps"));
    EXPECT_THAT(e.message(), HasSubstr("max_len 10"));
  }
  // The registered model checks the data's window length at build time.
  auto windows = data::make_window_dataset({{"x", at::randn({100, 3})}}, data::WindowOptions{32, 1, 1, {0}}, "series");
  const Error e = error_from([&] {
    build_model("model: {name: transformer, in_features: 3, d_model: 8, heads: 2, layers: 1, ff: 8, max_len: 16}\n", windows);
  });
  EXPECT_EQ(e.kind(), ErrorKind::kConfig);
  EXPECT_THAT(e.message(), HasSubstr("model.max_len is 16"));
  EXPECT_THAT(e.message(), HasSubstr("32 steps"));
}

TEST(TransformerModel, BuildChecksWidthsAgainstTheData) {
  // Windows of 8 steps x 3 features, targets: 2 steps x columns {0, 2} = 4 values per sample.
  auto windows = data::make_window_dataset({{"x", at::randn({50, 3})}}, data::WindowOptions{8, 1, 2, {0, 2}}, "series");
  const std::string base = "model: {name: transformer, d_model: 8, heads: 2, layers: 1, ff: 8, ";
  const Error out = error_from([&] { build_model(base + "in_features: 3, out_features: 2}\n", windows); });
  EXPECT_EQ(out.kind(), ErrorKind::kConfig);
  EXPECT_THAT(out.message(), HasSubstr("model.out_features is 2"));
  EXPECT_THAT(out.message(), HasSubstr("[2, 2] = 4 values"));
  EXPECT_THAT(out.hint(), HasSubstr("model.out_features: 4"));
  const Error in = error_from([&] { build_model(base + "in_features: 5, out_features: 4}\n", windows); });
  EXPECT_THAT(in.message(), HasSubstr("model.in_features is 5"));
  EXPECT_THAT(in.message(), HasSubstr("3 features"));
  // Right widths: the task's loss is the MSE of [B, 4] predictions against y [B, 2, 2].
  BuiltModel ok = build_model(base + "in_features: 3, out_features: 4}\n", windows);
  data::FetchContext fetch;
  const std::vector<std::int64_t> idx{0, 1, 2};
  const data::Batch batch = windows->get_batch(idx, fetch);
  const StepOutput step = ok.task->step(*ok.module, batch);
  EXPECT_EQ(step.loss.dim(), 0);
  EXPECT_TRUE(std::isfinite(step.loss.item<float>()));
}

// Variable-length sequences (4 to 12 steps, 3 features; padded with large junk) with target
// y = mean over the valid steps of x0 * x1: the model must multiply per step and average over the valid steps
// only. Predicting 0 scores E[1/length] ~ 0.15; the trained model's mean loss over its last 20 of 150 Adam
// steps (batch 32, lr 3e-3) must be below 0.05.
TEST(TransformerModel, LearnsVariableLengthMeanOfProductsBelow0p05In150Steps) {
  const OneThread one_thread;
  torch::manual_seed(11);
  BuiltModel built = build_model(
      "model: {name: transformer, in_features: 3, d_model: 32, heads: 2, layers: 1, ff: 64, dropout: 0.0, "
      "out_features: 1, pooling: mean}\n");
  built.module->train();
  torch::optim::Adam optimizer(built.module->parameters(), torch::optim::AdamOptions(3e-3));
  const std::int64_t batch = 32;
  auto make_batch = [&] {
    const at::Tensor lengths = at::randint(4, 13, {batch}, at::kLong);
    const at::Tensor valid = (at::arange(12).unsqueeze(0) < lengths.unsqueeze(1)).unsqueeze(2);
    const at::Tensor x = at::where(valid, at::randn({batch, 12, 3}), at::randn({batch, 12, 3}) * 10);
    const at::Tensor y = (x.select(2, 0) * x.select(2, 1) * valid.squeeze(2)).sum(1) / lengths;
    data::Batch b;
    b.size = batch;
    b.tensors = {{"x", x}, {"x_lengths", lengths}, {"y", y.unsqueeze(1)}};
    return b;
  };
  const double tail = train_tail_loss(built, optimizer, make_batch, 150, 20);
  RecordProperty("tail_loss", std::to_string(tail));
  EXPECT_LT(tail, 0.05);
}

// Activation checkpointing on every encoder layer, with dropout 0.1 on: the forward's RNG state is replayed in
// the recomputation, so loss and gradients are bitwise the same as without checkpointing.
TEST(TransformerModel, CheckpointingEncoderLayersGivesIdenticalGradients) {
  torch::manual_seed(13);
  auto o = tiny_model("mean", 0.1);
  o.encoder.layers = 3;
  TransformerModel model(o);
  model->train();
  const at::Tensor x = at::randn({4, 10, 3});
  const at::Tensor lengths = at::tensor(std::vector<std::int64_t>{10, 7, 3, 10}, at::kLong);
  auto run = [&](std::uint64_t seed) {
    model->zero_grad();
    torch::manual_seed(seed);
    const at::Tensor loss = model->forward(x, lengths).square().sum();
    loss.backward();
    std::vector<at::Tensor> out{loss.detach().clone()};
    for (const auto& p : model->parameters()) out.push_back(p.grad().clone());
    return out;
  };
  const auto plain = run(42);
  const auto plain_other_seed = run(43);
  const auto selected = apply_checkpointing(*model, {"encoder.layers.*"});
  EXPECT_THAT(selected, ElementsAre("encoder.layers.0", "encoder.layers.1", "encoder.layers.2"));
  const auto checkpointed = run(42);
  EXPECT_THAT(model->encoder()->checkpointed(), ElementsAre("layers.0", "layers.1", "layers.2"));
  ASSERT_EQ(plain.size(), checkpointed.size());
  for (std::size_t i = 0; i < plain.size(); ++i) EXPECT_TRUE(at::equal(plain[i], checkpointed[i])) << "tensor " << i;
  // Dropout is on: another seed gives other gradients, so the equality above is not vacuous.
  EXPECT_FALSE(at::equal(plain[0], plain_other_seed[0]));
}

TEST(TransformerModel, CheckpointingReportsTheSelectedBlockNames) {
  auto o = tiny_model();
  o.encoder.layers = 4;
  TransformerModel model(o);
  EXPECT_THAT(model->checkpoint_blocks(),
              ElementsAre("encoder.layers.0", "encoder.layers.1", "encoder.layers.2", "encoder.layers.3"));
  EXPECT_THAT(apply_checkpointing(*model, {"encoder.layers.3", "encoder.layers.1"}),
              ElementsAre("encoder.layers.1", "encoder.layers.3"));
  EXPECT_THAT(model->checkpointed(), ElementsAre("encoder.layers.1", "encoder.layers.3"));
  model->forward(at::randn({2, 4, 3}));
  EXPECT_THAT(model->encoder()->checkpointed(), ElementsAre("layers.1", "layers.3"));
  // Names are the model's: the encoder's own "layers.*" select nothing here.
  const Error e = error_from([&] { apply_checkpointing(*model, {"layers.*"}); });
  EXPECT_EQ(e.kind(), ErrorKind::kConfig);
  EXPECT_THAT(e.hint(), HasSubstr("encoder.layers.0"));
  // Clearing the selection reaches the encoder at the next forward.
  apply_checkpointing(*model, {});
  model->forward(at::randn({2, 4, 3}));
  EXPECT_TRUE(model->encoder()->checkpointed().empty());
}

}  // namespace
}  // namespace bellows::models
