// The text-pair classifier "text_pair"; see text_pair.h.
#include "bellows/models/text_pair.h"

#include <ATen/ATen.h>
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <map>

#include "bellows/config/binding.h"  // defines: Binding
#include "bellows/config/paths.h"    // defines: check_path_exists
#include "bellows/models/class_count.h"
#include "bellows/models/dropout.h"
#include "bellows/models/flops.h"
#include "bellows/models/registry.h"
#include "bellows/util/check.h"
#include "bellows/util/format.h"  // defines: shape_of

namespace bellows::models {
namespace {

constexpr std::string_view kEncoderPrefix = "encoder.";

}  // namespace

// --- the encoder: embeddings + Transformer ---

TextEncoderImpl::TextEncoderImpl(const TextPairOptions& o) {
  BELLOWS_CHECK_CONFIG(o.vocab_size > 0, fmt::format("text_pair vocab_size={}, expected positive", o.vocab_size),
                       "set model.vocab_size, or train with text_pairs data (the tokenizer gives it)");
  BELLOWS_CHECK_CONFIG(o.pad_id >= 0 && o.pad_id < o.vocab_size,
                       fmt::format("text_pair pad_id={} outside the vocabulary of {}", o.pad_id, o.vocab_size),
                       "use the tokenizer's pad id");
  const std::int64_t d = o.encoder.d_model;
  token_embedding_ = register_module("token_embedding",
                                     torch::nn::Embedding(torch::nn::EmbeddingOptions(o.vocab_size, d).padding_idx(o.pad_id)));
  segment_embedding_ = register_module("segment_embedding", torch::nn::Embedding(2, d));
  {
    // BERT's initialisation: N(0, 0.02), the scale of the learned positions; the pad row stays zero.
    at::NoGradGuard no_grad;
    token_embedding_->weight.normal_(0.0, 0.02);
    token_embedding_->weight[o.pad_id].zero_();
    segment_embedding_->weight.normal_(0.0, 0.02);
  }
  transformer_ = register_module("transformer", TransformerEncoder(o.encoder));
}

at::Tensor TextEncoderImpl::embed(const at::Tensor& tokens, const at::Tensor& segments) {
  BELLOWS_CHECK_DATA(tokens.dim() == 2 && tokens.scalar_type() == at::kLong,
                     fmt::format("text_pair tokens have shape {} and type {}; expected int64 [B, T]", shape_of(tokens),
                                 c10::toString(tokens.scalar_type())),
                     "feed token ids (data.source: text_pairs)");
  at::Tensor h = token_embedding_->forward(tokens);
  if (segments.defined()) {
    BELLOWS_CHECK_DATA(segments.sizes() == tokens.sizes(),
                       fmt::format("segments have shape {}, tokens {}", shape_of(segments), shape_of(tokens)),
                       "give one segment id (0 or 1) per token");
    h = h + segment_embedding_->forward(segments.to(at::kLong));
  } else {
    h = h + segment_embedding_->weight[0];
  }
  return h;
}

at::Tensor TextEncoderImpl::encode(const at::Tensor& embedded, const at::Tensor& mask) {
  return transformer_->forward(embedded, mask.defined() ? mask.logical_not() : at::Tensor());
}

// --- the classifier ---

TextPairClassifierImpl::TextPairClassifierImpl(const TextPairOptions& options) : options_(options) {
  BELLOWS_CHECK_CONFIG(options.num_classes >= 2, fmt::format("text_pair num_classes={}, expected >= 2", options.num_classes),
                       "set model.out_features, or train with labelled text_pairs data");
  BELLOWS_CHECK_CONFIG(options.pooling == "cls" || options.pooling == "mean", fmt::format("unknown pooling '{}'", options.pooling),
                       "use one of: cls, mean");
  encoder_ = register_module("encoder", TextEncoder(options));
  dropout_ = register_module("dropout", torch::nn::Dropout(options.encoder.dropout));
  head_ = register_module("head", torch::nn::Linear(options.encoder.d_model, options.num_classes));
}

bool TextPairClassifierImpl::encoder_frozen() const {
  for (const auto& p : encoder_->parameters()) {
    if (p.requires_grad()) return false;
  }
  return true;
}

void TextPairClassifierImpl::freeze_encoder() {
  for (auto& p : encoder_->parameters()) {
    p.requires_grad_(false);
    p.mutable_grad().reset();
  }
  if (is_training()) encoder_->eval();
}

void TextPairClassifierImpl::train(bool on) {
  torch::nn::Module::train(on);
  if (on && encoder_frozen()) encoder_->eval();
}

std::vector<std::string> TextPairClassifierImpl::checkpoint_blocks() const {
  std::vector<std::string> names;
  for (const auto& b : encoder_->transformer()->checkpoint_blocks()) names.push_back("encoder.transformer." + b);
  return names;
}

void TextPairClassifierImpl::set_block_hooks(std::shared_ptr<BlockHooks> hooks, const std::string& prefix) {
  encoder_->transformer()->set_block_hooks(std::move(hooks), prefix + "encoder.transformer.");
}

at::Tensor TextPairClassifierImpl::pool_and_classify(const at::Tensor& encoded, const at::Tensor& mask) {
  at::Tensor pooled;
  if (options_.pooling == "cls" || !mask.defined()) {
    pooled = options_.pooling == "cls" ? encoded.select(1, 0) : encoded.mean(1);
  } else {
    const at::Tensor m = mask.to(encoded.scalar_type()).unsqueeze(2);  // [B, T, 1]
    pooled = (encoded * m).sum(1) / m.sum(1).clamp_min(1.0);
  }
  return head_->forward(models::dropout(pooled, options_.encoder.dropout, is_training()));
}

at::Tensor TextPairClassifierImpl::forward_embedded(const at::Tensor& embedded, const at::Tensor& mask) {
  // The blocks selected on this model ("encoder.transformer.layers.N") are the Transformer's "layers.N".
  if (checkpointed() != handed_down_) {
    std::vector<std::string> names;
    for (const auto& name : checkpointed()) names.push_back(name.substr(std::string("encoder.transformer.").size()));
    encoder_->transformer()->set_checkpointed(names);
    handed_down_ = checkpointed();
  }
  if (mask.defined()) {
    BELLOWS_CHECK_DATA(mask.dim() == 2 && mask.size(0) == embedded.size(0) && mask.size(1) == embedded.size(1),
                       fmt::format("token mask has shape {}, the embedded tokens {}", shape_of(mask), shape_of(embedded)),
                       "pass x_mask [B, T], true at real tokens");
  }
  const at::Tensor m = mask.defined() ? mask.to(embedded.device(), at::kBool) : at::Tensor();
  at::Tensor encoded;
  if (encoder_frozen() && !embedded.requires_grad()) {
    at::NoGradGuard no_grad;  // a fixed feature extractor: no graph, no saved activations
    encoded = encoder_->encode(embedded, m);
  } else {
    encoded = encoder_->encode(embedded, m);
  }
  return pool_and_classify(encoded, m);
}

at::Tensor TextPairClassifierImpl::forward(const at::Tensor& tokens, const at::Tensor& segments, const at::Tensor& mask) {
  at::Tensor embedded;
  if (encoder_frozen()) {
    at::NoGradGuard no_grad;
    embedded = encoder_->embed(tokens, segments);
  } else {
    embedded = encoder_->embed(tokens, segments);
  }
  return forward_embedded(embedded, mask);
}

namespace {

// Cross-entropy over the pair's logits; accuracy is the monitored metric.
class TextPairTask final : public Task {
 public:
  StepOutput step(torch::nn::Module& m, const data::Batch& batch) override {
    auto& model = static_cast<TextPairClassifierImpl&>(m);
    const at::Tensor logits = model.forward(batch.at("x"), optional(batch, "segments"), optional(batch, "x_mask")).to(at::kFloat);
    const at::Tensor target = batch.at("y").to(at::kLong).view({-1});
    StepOutput out;
    out.loss = at::cross_entropy_loss(logits, target);
    out.metrics.emplace_back("accuracy", logits.detach().argmax(1).eq(target).to(at::kFloat).mean());
    return out;
  }
  std::string monitor() const override { return "accuracy"; }
  bool lower_is_better() const override { return false; }
  // Class probabilities, float32 [B, num_classes].
  at::Tensor predict(torch::nn::Module& m, const data::Batch& batch, const PredictOptions& options) override {
    BELLOWS_CHECK_USAGE(options.samples == 1, fmt::format("the text-pair classifier is deterministic; {} samples per input", options.samples),
                        "drop --samples");
    auto& model = static_cast<TextPairClassifierImpl&>(m);
    return at::softmax(model.forward(batch.at("x"), optional(batch, "segments"), optional(batch, "x_mask")).to(at::kFloat), 1);
  }

 private:
  static at::Tensor optional(const data::Batch& batch, const char* name) {
    const auto it = batch.tensors.find(name);
    return it == batch.tensors.end() ? at::Tensor() : it->second;
  }
};

// A model key that may be taken from the data (0 in the config): the data's value, or the config's when it
// agrees; `what` names the data's value in errors.
std::int64_t from_data(const config::Config& c, const std::string& key, std::int64_t configured, std::int64_t data_value,
                       const std::string& what) {
  if (configured == 0) return data_value;
  BELLOWS_CHECK_CONFIG(configured == data_value,
                       fmt::format("{} is {} ({}) but the data's {} is {}", key, configured, c.origin(key).str(), what, data_value),
                       fmt::format("set {}: 0 to take it from the data, or {}", key, data_value));
  return configured;
}

// The model.* keys of TextPairOptions, bound once (config/binding.h). A 0 in model.max_len, vocab_size or
// out_features (the class count, models/class_count.h, read apart) takes the data's value (build below), so the
// config's default is 0 where the struct's is a size for C++ callers. freeze_encoder and the encoder_weights keys
// act on the built model: TextPairBuildOptions below.
const config::Binding<TextPairOptions>& text_pair_binding() {
  using O = TextPairOptions;
  using E = TransformerEncoderOptions;
  return config::bound<O>("model.", [](config::Binding<O>& b) {
    config::Binding<E> encoder = encoder_binding(O{}.encoder);  // positions: learned
    encoder.key("max_len", &E::max_len, "longest token sequence (0: data.text.max_len)").min(0).default_value(YAML::Node(0));
    b.nest(&O::encoder, encoder);
    b.key("pooling", &O::pooling, "sequence summary: the [CLS] output or the mean over real tokens").choices({"cls", "mean"});
    b.key("vocab_size", &O::vocab_size, "token embedding rows (0: the tokenizer's vocabulary)").min(0).default_value(YAML::Node(0));
    b.key("pad_id", &O::pad_id, "padding token id without text_pairs data (with it: the tokenizer's)").min(0);
  });
}

// What the build does to the built model: freeze its encoder, import a pretrained one.
struct TextPairBuildOptions {
  bool freeze_encoder = false;
  std::string encoder_weights;  // "" none
  bool encoder_weights_strict = true;
};

const config::Binding<TextPairBuildOptions>& text_pair_build_binding() {
  using O = TextPairBuildOptions;
  return config::bound<O>("model.", [](config::Binding<O>& b) {
    b.key("freeze_encoder", &O::freeze_encoder, "freeze the encoder (embeddings + Transformer); only the head trains");
    b.key("encoder_weights", &O::encoder_weights, "safetensors file loaded into the encoder by name (\"encoder.\" prefix optional)")
        .file_path();
    b.key("encoder_weights_strict", &O::encoder_weights_strict,
          "encoder_weights: every encoder tensor must match (false: load what matches)");
  });
}

void declare_text_pair_keys(config::Schema& s) {
  text_pair_binding().declare(s);
  declare_class_count(s, "the data's labels");
  text_pair_build_binding().declare(s);
}

std::optional<double> text_pair_forward_flops(const config::Config& c, const ModelContext& context) {
  // At the longest pair the data allows: batches are padded to their longest pair, so most steps compute less.
  TextPairOptions o = text_pair_binding().read(c);
  o.num_classes = read_class_count(c).value;
  const auto& text = context.facts.text;
  const std::int64_t tokens = o.encoder.max_len > 0 ? o.encoder.max_len : text ? text->max_len : 128;
  const std::int64_t num_classes = o.num_classes > 0 ? o.num_classes : text ? text->num_classes : 0;
  if (num_classes <= 0) return std::nullopt;
  return encoder_forward_flops(o.encoder, tokens) + linear_flops(1, o.encoder.d_model, num_classes);
}

// The model.* keys, with the vocabulary, labels and length that the config leaves at 0 taken from the data.
TextPairOptions text_pair_options_from(const config::Config& c, const ModelContext& context) {
  TextPairOptions o = text_pair_binding().read(c);
  const ClassCount class_count = read_class_count(c);
  // As configured (0: the data's).
  const std::int64_t vocab = o.vocab_size, classes = class_count.value, max_len = o.encoder.max_len;
  o.num_classes = classes;
  if (const auto& text = context.facts.text) {  // tokenised text data: its vocabulary, labels and length
    o.vocab_size = from_data(c, "model.vocab_size", vocab, text->vocab_size, "tokenizer vocabulary size");
    o.num_classes = from_data(c, class_count.key, classes, text->num_classes, "number of labels");
    o.pad_id = text->pad_id;
    o.encoder.max_len = max_len == 0 ? text->max_len : max_len;
    BELLOWS_CHECK_CONFIG(o.encoder.positions == "none" || o.encoder.max_len >= text->max_len,
                         fmt::format("model.max_len is {} ({}) but data.text.max_len allows {} tokens", max_len,
                                     c.origin("model.max_len").str(), text->max_len),
                         fmt::format("set model.max_len: 0 (the data's), or at least {}", text->max_len));
  } else {
    BELLOWS_CHECK_CONFIG(vocab > 0 && classes > 0,
                         fmt::format("model text_pair without text_pairs data needs model.vocab_size and {} "
                                     "(they are {} and {})", class_count.key, vocab, classes),
                         "use data.source: text_pairs, or set both keys");
    o.encoder.max_len = max_len == 0 ? 128 : max_len;  // pad_id, vocab_size and the class count: the config's
  }
  return o;
}

BuiltModel build_text_pair(const config::Config& c, const ModelContext& context) {
  auto module = std::make_shared<TextPairClassifierImpl>(text_pair_options_from(c, context));
  const TextPairBuildOptions o = text_pair_build_binding().read(c);
  if (o.freeze_encoder) module->freeze_encoder();
  BuiltModel built{module, std::make_shared<TextPairTask>()};
  if (auto note = class_count_note(c)) built.plan_rows.push_back(*note);
  if (const std::string& weights = o.encoder_weights; !weights.empty()) {
    config::check_path_exists(c, "model.encoder_weights", weights, ErrorKind::kData,
                              "give a safetensors file (bellows ckpt export writes one)");
    // A pretrained encoder, imported by app/ after building (names with or without the "encoder." prefix).
    built.imports.push_back({weights, std::string(kEncoderPrefix), o.encoder_weights_strict, "encoder",
                             "model.encoder_weights_strict"});
  }
  return built;
}

ModelEntry text_pair_entry() {
  ModelEntry e;
  e.name = "text_pair";
  e.help = "sentence-pair classifier: token + segment embeddings, Transformer encoder, [CLS]/mean pooling, linear head (W7)";
  // Two narrow layers; the vocabulary, the classes and the length are the data's (its text facts).
  e.demo.yaml = R"(data:
  source: synthetic
  kind: pairs
  samples: 4096
  steps: 8
  vocab_size: 32
  classes: 3
  batch_size: 64
  val_fraction: 0.1
model:
  name: text_pair
  d_model: 64
  heads: 4
  layers: 2
  ff: 128
)";
  e.demo.data =
      "synthetic token pairs (two sentences of 8 words from 32 ids; 3 classes: how the second's group of words "
      "follows the first's; 4096 samples)";
  e.add_keys = declare_text_pair_keys;
  e.io = class_count_io;
  e.forward_flops = text_pair_forward_flops;
  e.forward_flops_basis = "at the longest pair (model.max_len or data.text.max_len tokens); batches are padded to their longest pair, "
                          "so shorter batches compute less";
  e.build = build_text_pair;
  return e;
}

const ModelRegistrar kTextPairRegistered(text_pair_entry());

}  // namespace

}  // namespace bellows::models
