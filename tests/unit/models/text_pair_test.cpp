// The text-pair classifier "text_pair": output shapes and parameter names, invariance to padding, float64
// gradients against central differences (token path and float input path), learning a synthetic pair task,
// building from text_pairs data (vocabulary, classes, max_len from the data), freezing the encoder in the
// Trainer, importing encoder weights by name, and activation checkpointing of its Transformer layers.
#include "bellows/models/text_pair.h"

#include <ATen/ATen.h>
#include <fmt/format.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <torch/csrc/autograd/autograd.h>
#include <torch/optim/adam.h>
#include <torch/utils.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "bellows/ckpt/safetensors.h"
#include "bellows/config/schema.h"
#include "bellows/data/build.h"
#include "bellows/data/tensor_source.h"
#include "bellows/data/text_pairs.h"
#include "bellows/models/activation_checkpoint.h"
#include "bellows/models/registry.h"
#include "bellows/train/trainer.h"
#include "bellows/util/error.h"
#include "data/data_config.h"
#include "model_test_util.h"
#include "test_util.h"

namespace bellows::models {
namespace {

namespace fs = std::filesystem;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using test_support::build_model;
using test_support::error_from;
using test_support::TempDir;
using test_support::expect_gradients_match;
using test_support::OneThread;
using test_support::tiny_encoder;

constexpr std::int64_t kPad = 0, kCls = 2, kSep = 3;

TextPairOptions tiny_text_pair(double dropout = 0.0, const std::string& pooling = "cls") {
  TextPairOptions o;
  o.vocab_size = 40;
  o.pad_id = kPad;
  o.num_classes = 3;
  o.pooling = pooling;
  o.encoder = tiny_encoder(2, dropout);
  o.encoder.positions = "learned";
  return o;
}

// Pairs [CLS] a [SEP] b [SEP] of random tokens 4..vocab-1, with lengths; padded with kPad.
struct Pairs {
  at::Tensor tokens, segments, mask;
};
Pairs random_pairs(std::int64_t batch, const std::vector<std::int64_t>& lengths_a, const std::vector<std::int64_t>& lengths_b,
                   std::int64_t vocab) {
  std::int64_t longest = 0;
  for (std::int64_t i = 0; i < batch; ++i) longest = std::max(longest, lengths_a[i] + lengths_b[i] + 3);
  Pairs p{at::full({batch, longest}, kPad, at::kLong), at::zeros({batch, longest}, at::kLong), at::zeros({batch, longest}, at::kBool)};
  for (std::int64_t i = 0; i < batch; ++i) {
    const std::int64_t la = lengths_a[i], lb = lengths_b[i], n = la + lb + 3;
    p.tokens[i][0] = kCls;
    p.tokens[i].narrow(0, 1, la).copy_(at::randint(4, vocab, {la}, at::kLong));
    p.tokens[i][la + 1] = kSep;
    p.tokens[i].narrow(0, la + 2, lb).copy_(at::randint(4, vocab, {lb}, at::kLong));
    p.tokens[i][n - 1] = kSep;
    p.segments[i].narrow(0, la + 2, lb + 1).fill_(1);
    p.mask[i].narrow(0, 0, n).fill_(true);
  }
  return p;
}

std::map<std::string, at::Tensor> encoder_tensors(TextPairClassifierImpl& m) {
  std::map<std::string, at::Tensor> out;
  for (const auto& p : m.encoder()->named_parameters()) out.emplace(p.key(), p.value().detach().clone());
  return out;
}

TEST(TextPair, OutputShapesAndParameterNames) {
  torch::manual_seed(1);
  for (const std::string pooling : {"cls", "mean"}) {
    TextPairClassifier model(tiny_text_pair(0.0, pooling));
    const Pairs p = random_pairs(4, {3, 5, 1, 6}, {2, 4, 6, 1}, 40);
    EXPECT_EQ(model->forward(p.tokens, p.segments, p.mask).sizes(), (std::vector<std::int64_t>{4, 3})) << pooling;
    EXPECT_EQ(model->forward(p.tokens).sizes(), (std::vector<std::int64_t>{4, 3})) << pooling;
  }
  std::vector<std::string> names;
  for (const auto& p : TextPairClassifier(tiny_text_pair())->named_parameters()) names.push_back(p.key());
  EXPECT_THAT(names, ::testing::IsSupersetOf({"encoder.token_embedding.weight", "encoder.segment_embedding.weight",
                                              "encoder.transformer.pos_embedding", "encoder.transformer.layers.1.linear1.weight",
                                              "encoder.transformer.norm.weight", "head.weight", "head.bias"}));
  // The pad token's embedding row is zero.
  TextPairClassifier model(tiny_text_pair());
  EXPECT_EQ(model->named_parameters()["encoder.token_embedding.weight"][kPad].abs().sum().item<double>(), 0.0);
}

TEST(TextPair, PaddingChangesNothing) {
  torch::manual_seed(2);
  for (const std::string pooling : {"cls", "mean"}) {
    TextPairClassifier model(tiny_text_pair(0.1, pooling));
    model->eval();
    const Pairs p = random_pairs(3, {4, 2, 5}, {3, 1, 5}, 40);  // lengths 10, 6, 13
    const at::Tensor batched = model->forward(p.tokens, p.segments, p.mask);
    for (std::int64_t i = 0; i < 3; ++i) {
      const std::int64_t n = p.mask[i].sum().item<std::int64_t>();
      const at::Tensor alone = model->forward(p.tokens[i].narrow(0, 0, n).unsqueeze(0), p.segments[i].narrow(0, 0, n).unsqueeze(0));
      EXPECT_TRUE(at::allclose(batched[i], alone[0], 1e-5, 1e-6)) << pooling << " sample " << i;
    }
  }
}

TEST(TextPair, GradientsMatchFiniteDifferencesFloat64) {
  torch::manual_seed(3);
  for (const std::string pooling : {"cls", "mean"}) {
    TextPairClassifier model(tiny_text_pair(0.0, pooling));
    model->to(at::kDouble);
    model->eval();
    const Pairs p = random_pairs(2, {3, 2}, {2, 4}, 40);
    const at::Tensor w = at::randn({2, 3}, at::kDouble);
    SCOPED_TRACE(pooling);
    // Through the tokens: every parameter, the embedding rows included (sampled rows the tokens use).
    std::vector<at::Tensor> params{model->named_parameters()["encoder.token_embedding.weight"]};
    for (const auto& q : model->named_parameters()) {
      if (q.key() != "encoder.token_embedding.weight") params.push_back(q.value());
    }
    // Embedding elements of rows the tokens use ([CLS], the first premise token, [SEP]), and the pad row.
    const std::int64_t d = 8, used = p.tokens[0][1].item<std::int64_t>();
    const std::vector<std::vector<std::int64_t>> rows = {{kCls * d, kCls * d + 5, used * d + 1, used * d + 7, kSep * d + 2, kPad * d + 3}};
    auto f = [&] { return (model->forward(p.tokens, p.segments, p.mask) * w).sum(); };
    expect_gradients_match(f, params, 3, rows);
    // The float input path: gradients with respect to the embedded inputs.
    const at::Tensor embedded = at::randn({2, p.tokens.size(1), 8}, at::kDouble).requires_grad_(true);
    auto g = [&] { return (model->forward_embedded(embedded, p.mask) * w).sum(); };
    expect_gradients_match(g, {embedded}, 8);
  }
}

// Pairs [CLS] a1 a2 a3 [SEP] b1 b2 b3 [SEP]: each sentence has one keyword (tokens 4..7) at a random position
// among filler tokens (12..23); label 1 when the two keywords are the same (half of the pairs), else 0. The
// model must find the keywords in both segments and compare them through attention.
data::Batch keyword_batch(std::int64_t batch) {
  const std::int64_t len = 3, keywords = 4;
  at::Tensor a = at::randint(12, 24, {batch, len}, at::kLong), b = at::randint(12, 24, {batch, len}, at::kLong);
  const at::Tensor same = at::randint(0, 2, {batch}, at::kLong);
  const at::Tensor ka = at::randint(4, 4 + keywords, {batch, 1}, at::kLong);
  const at::Tensor other = (ka - 4 + at::randint(1, keywords, {batch, 1}, at::kLong)).remainder(keywords) + 4;
  const at::Tensor kb = at::where(same.to(at::kBool).unsqueeze(1), ka, other);
  a.scatter_(1, at::randint(0, len, {batch, 1}, at::kLong), ka);
  b.scatter_(1, at::randint(0, len, {batch, 1}, at::kLong), kb);
  data::Batch out;
  out.size = batch;
  out.tensors["x"] = at::cat({at::full({batch, 1}, kCls, at::kLong), a, at::full({batch, 1}, kSep, at::kLong), b,
                              at::full({batch, 1}, kSep, at::kLong)}, 1);
  out.tensors["segments"] = at::cat({at::zeros({len + 2}, at::kLong), at::ones({len + 1}, at::kLong)}).expand({batch, 2 * len + 3}).contiguous();
  out.tensors["y"] = same;
  return out;
}

TEST(TextPair, LearnsWhetherTwoSentencesShareAKeywordBelow0p1In600Steps) {
  torch::manual_seed(11);
  BuiltModel built = build_model(
      "model: {name: text_pair, vocab_size: 24, out_features: 2, d_model: 32, heads: 4, layers: 2, ff: 64, dropout: 0.0, "
      "max_len: 16}\n");
  built.module->train();
  torch::optim::Adam optimizer(built.module->parameters(), torch::optim::AdamOptions(3e-3));
  double tail_loss = 0, tail_accuracy = 0;
  for (int step = 0; step < 600; ++step) {
    const StepOutput out = built.task->step(*built.module, keyword_batch(32));
    optimizer.zero_grad();
    out.loss.backward();
    optimizer.step();
    if (step >= 580) {
      tail_loss += out.loss.item<double>() / 20;
      tail_accuracy += out.metrics.at(0).second.item<double>() / 20;
    }
  }
  // Chance is loss ln 2 = 0.69 and accuracy 0.5.
  EXPECT_LT(tail_loss, 0.1);
  EXPECT_GT(tail_accuracy, 0.95);
  EXPECT_EQ(built.task->monitor(), "accuracy");
  EXPECT_FALSE(built.task->lower_is_better());
}

TEST(TextPair, BuildTakesVocabularyClassesAndLengthFromTheData) {
  const TempDir temp("text_pair_test");
  const fs::path& dir = temp.path();
  std::ofstream(dir / "pairs.tsv") << "premise\thypothesis\tlabel\nthe cat sleeps\tthe cat rests\tyes\n"
                                      "the dog barks\tthe bird sings\tno\nthe farmer reads\tthe farmer sleeps\tmaybe\n";
  const data::DataSplits splits = data::build_datasets(test_support::data_config(fmt::format(
      "data: {{source: text_pairs, path: '{}', val_fraction: 0.0, text: {{max_len: 24, vocab_size: 40}}}}\n", (dir / "pairs.tsv").string())), 0);
  const auto* text = data::find_text_pairs(*splits.train);
  ASSERT_NE(text, nullptr);
  BuiltModel built = build_model("model: {name: text_pair, d_model: 16, heads: 2, layers: 1, ff: 32}\n", splits.train);
  auto& model = static_cast<TextPairClassifierImpl&>(*built.module);
  EXPECT_EQ(model.options().vocab_size, text->vocab_size());
  EXPECT_EQ(model.options().num_classes, 3);
  EXPECT_EQ(model.options().pad_id, text->pad_id());
  EXPECT_EQ(model.options().encoder.max_len, 24);
  // A real batch through the task.
  data::FetchContext context;
  const std::vector<std::int64_t> idx = {0, 1, 2};
  const StepOutput out = built.task->step(model, splits.train->get_batch(idx, context));
  EXPECT_TRUE(std::isfinite(out.loss.item<double>()));
  // Configured values that disagree with the data are errors naming both.
  Error e = error_from([&] { build_model("model: {name: text_pair, out_features: 2, d_model: 16, heads: 2, layers: 1}\n", splits.train); });
  EXPECT_EQ(e.kind(), ErrorKind::kConfig);
  EXPECT_THAT(e.message(), HasSubstr("model.out_features is 2"));
  EXPECT_THAT(e.message(), HasSubstr("number of labels is 3"));
  e = error_from([&] { build_model("model: {name: text_pair, max_len: 10, d_model: 16, heads: 2, layers: 1}\n", splits.train); });
  EXPECT_THAT(e.message(), HasSubstr("data.text.max_len allows 24 tokens"));
  e = error_from([&] { build_model("model: {name: text_pair, d_model: 16, heads: 2, layers: 1}\n"); });
  EXPECT_THAT(e.message(), HasSubstr("needs model.vocab_size and model.out_features"));
  // model.num_classes, the old name, still counts (the plan row says it is deprecated: models/class_count.h).
  e = error_from([&] { build_model("model: {name: text_pair, num_classes: 2, d_model: 16, heads: 2, layers: 1}\n", splits.train); });
  EXPECT_THAT(e.message(), HasSubstr("model.num_classes is 2"));
}

// The Trainer with model.freeze_encoder (or train.freeze: ["encoder.*"]): the encoder's weights stay bitwise
// the same over the steps, the head moves, and the frozen encoder runs in eval mode (its dropout is off).
TEST(TextPair, FrozenEncoderStaysUnchangedWhileTheHeadTrains) {
  for (const bool by_key : {true, false}) {
    torch::manual_seed(5);
    BuiltModel built = build_model(fmt::format("model: {{name: text_pair, vocab_size: 24, out_features: 2, d_model: 16, heads: 2, "
                                         "layers: 2, ff: 32, dropout: 0.2, max_len: 16, freeze_encoder: {}}}\n", by_key));
    auto& model = static_cast<TextPairClassifierImpl&>(*built.module);
    EXPECT_EQ(model.encoder_frozen(), by_key);
    const auto before = encoder_tensors(model);
    const at::Tensor head_before = model.named_parameters()["head.weight"].detach().clone();
    const data::Batch b = keyword_batch(96);
    data::TensorSourceOptions so;
    so.batch_size = 32;
    data::TensorSource source(b.tensors, so);
    train::TrainerOptions o;
    o.optimizer.lr = 1e-2;
    o.epochs = 2;
    if (!by_key) o.freeze = {"encoder.*"};
    train::Trainer trainer(built.module, built.task, o);
    const train::FitResult r = trainer.fit(source);
    EXPECT_EQ(r.steps, 6);
    EXPECT_TRUE(model.encoder_frozen());
    EXPECT_TRUE(model.is_training());
    EXPECT_FALSE(model.encoder()->is_training());  // a frozen encoder is a fixed feature extractor
    for (const auto& [name, t] : encoder_tensors(model)) EXPECT_TRUE(at::equal(t, before.at(name))) << name;
    EXPECT_FALSE(at::equal(model.named_parameters()["head.weight"], head_before));
    // Without autograd through the encoder, the logits' graph reaches only the head.
    const Pairs p = random_pairs(2, {2, 3}, {3, 2}, 24);
    const at::Tensor logits = model.forward(p.tokens, p.segments, p.mask);
    const auto grads = torch::autograd::grad({logits.sum()}, {model.named_parameters()["head.weight"]});
    EXPECT_TRUE(grads[0].defined());
  }
}

// What model.encoder_weights asks app/ to import.
models::WeightImport encoder_import(const fs::path& file, bool strict) {
  return models::WeightImport{file, "encoder.", strict, "encoder", "model.encoder_weights_strict"};
}

TEST(TextPair, EncoderWeightsLoadByNameWithOrWithoutThePrefix) {
  const TempDir temp("text_pair_test");
  const fs::path& dir = temp.path();
  torch::manual_seed(7);
  TextPairClassifier source(tiny_text_pair());
  // A whole model's tensors (as `bellows ckpt export` writes them): "encoder." prefix, plus the head.
  std::map<std::string, at::Tensor> whole;
  for (const auto& p : source->named_parameters()) whole.emplace(p.key(), p.value().detach());
  ckpt::write_safetensors(dir / "whole.safetensors", whole);
  // Only the encoder's, relative names.
  std::map<std::string, at::Tensor> relative;
  for (const auto& p : source->encoder()->named_parameters()) relative.emplace(p.key(), p.value().detach());
  ckpt::write_safetensors(dir / "relative.safetensors", relative);
  for (const char* file : {"whole.safetensors", "relative.safetensors"}) {
    torch::manual_seed(8);
    TextPairClassifier target(tiny_text_pair());
    const at::Tensor head = target->named_parameters()["head.weight"].detach().clone();
    EXPECT_TRUE(app::import_weights(*target, encoder_import(dir / file, true)).empty()) << file;
    for (const auto& [name, t] : encoder_tensors(*target)) EXPECT_TRUE(at::equal(t, relative.at(name))) << file << " " << name;
    EXPECT_TRUE(at::equal(target->named_parameters()["head.weight"], head)) << "the head is not the encoder's";
  }
  // Through the registry key, with the encoder frozen: the seed's workflow.
  const fs::path whole_path = dir / "whole.safetensors";
  BuiltModel built = build_model(fmt::format("model: {{name: text_pair, vocab_size: 40, out_features: 3, d_model: 8, heads: 2, layers: 2, "
                                       "ff: 16, max_len: 16, encoder_weights: '{}', freeze_encoder: true}}\n", whole_path.string()));
  auto& model = static_cast<TextPairClassifierImpl&>(*built.module);
  EXPECT_TRUE(model.encoder_frozen());
  for (const auto& [name, t] : encoder_tensors(model)) EXPECT_TRUE(at::equal(t, relative.at(name))) << name;

  // A file that lacks a tensor and has another shape: strict lists the differences, not strict loads the rest.
  std::map<std::string, at::Tensor> partial = relative;
  partial.erase("transformer.layers.1.linear2.bias");
  partial["segment_embedding.weight"] = at::zeros({3, 8});
  ckpt::write_safetensors(dir / "partial.safetensors", partial);
  TextPairClassifier target(tiny_text_pair());
  const Error e = error_from([&] { app::import_weights(*target, encoder_import(dir / "partial.safetensors", true)); });
  EXPECT_EQ(e.kind(), ErrorKind::kData);
  EXPECT_THAT(e.message(), HasSubstr("2 differences"));
  EXPECT_THAT(e.message(), HasSubstr("transformer.layers.1.linear2.bias: missing from the file"));
  EXPECT_THAT(e.message(), HasSubstr("segment_embedding.weight: shape [3, 8] in the file, [2, 8] in the encoder"));
  EXPECT_THAT(e.hint(), HasSubstr("encoder_weights_strict"));
  EXPECT_EQ(app::import_weights(*target, encoder_import(dir / "partial.safetensors", false)).size(), 2u);
  EXPECT_TRUE(at::equal(target->named_parameters()["encoder.transformer.layers.0.linear1.weight"],
                        relative.at("transformer.layers.0.linear1.weight")));
}

// Checkpointing every Transformer layer, dropout 0.1 on: the recomputation replays the RNG, so loss and
// gradients are bitwise those without checkpointing.
TEST(TextPair, CheckpointingTransformerLayersGivesIdenticalGradients) {
  torch::manual_seed(13);
  TextPairClassifier model(tiny_text_pair(0.1));
  model->train();
  EXPECT_THAT(model->checkpoint_blocks(), ElementsAre("encoder.transformer.layers.0", "encoder.transformer.layers.1"));
  const Pairs p = random_pairs(3, {4, 2, 5}, {3, 1, 5}, 40);
  auto run = [&](std::uint64_t seed) {
    model->zero_grad();
    torch::manual_seed(seed);
    const at::Tensor loss = model->forward(p.tokens, p.segments, p.mask).square().sum();
    loss.backward();
    std::vector<at::Tensor> out{loss.detach().clone()};
    for (const auto& q : model->parameters()) out.push_back(q.grad().clone());
    return out;
  };
  const auto plain = run(42);
  const auto other_seed = run(43);
  EXPECT_THAT(apply_checkpointing(*model, {"encoder.transformer.layers.*"}),
              ElementsAre("encoder.transformer.layers.0", "encoder.transformer.layers.1"));
  const auto checkpointed = run(42);
  EXPECT_THAT(model->encoder()->transformer()->checkpointed(), ElementsAre("layers.0", "layers.1"));
  ASSERT_EQ(plain.size(), checkpointed.size());
  for (std::size_t i = 0; i < plain.size(); ++i) EXPECT_TRUE(at::equal(plain[i], checkpointed[i])) << "tensor " << i;
  EXPECT_FALSE(at::equal(plain[0], other_seed[0]));  // dropout is on: the equality above is not vacuous
}

}  // namespace
}  // namespace bellows::models
