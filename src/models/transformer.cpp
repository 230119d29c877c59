// The Transformer encoder and the sequence model "transformer"; see transformer.h.
#include "bellows/models/transformer.h"

#include "bellows/models/flops.h"

#include <ATen/ATen.h>
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <torch/nn/init.h>

#include <cmath>
#include <limits>

#include "bellows/models/dropout.h"
#include "bellows/models/linear.h"
#include "bellows/models/registry.h"
#include "bellows/models/rnn.h"
#include "bellows/util/check.h"
#include "bellows/util/format.h"  // defines: shape_of

namespace bellows::models {
namespace {

void check_encoder_options(const TransformerEncoderOptions& o) {
  BELLOWS_CHECK_CONFIG(o.d_model > 0 && o.heads > 0 && o.layers > 0 && o.ff > 0,
                       fmt::format("transformer d_model={} heads={} layers={} ff={}, expected positive", o.d_model,
                                   o.heads, o.layers, o.ff),
                       "set model.d_model, model.heads, model.layers and model.ff to positive integers");
  BELLOWS_CHECK_CONFIG(o.d_model % o.heads == 0,
                       fmt::format("transformer d_model={} is not divisible by heads={}", o.d_model, o.heads),
                       "choose model.heads dividing model.d_model (e.g. d_model 256 with 4 or 8 heads)");
  BELLOWS_CHECK_CONFIG(o.dropout >= 0 && o.dropout < 1, fmt::format("transformer dropout {} outside [0, 1)", o.dropout),
                       "set model.dropout between 0 and 1");
  BELLOWS_CHECK_CONFIG(o.positions == "sinusoidal" || o.positions == "learned" || o.positions == "none",
                       fmt::format("unknown positions '{}'", o.positions), "use one of: sinusoidal, learned, none");
  BELLOWS_CHECK_CONFIG(o.positions != "sinusoidal" || o.d_model % 2 == 0,
                       fmt::format("sinusoidal positions need an even d_model, not {}", o.d_model),
                       "use an even model.d_model, or positions: learned");
  BELLOWS_CHECK_CONFIG(o.max_len > 0, fmt::format("transformer max_len={}, expected positive", o.max_len),
                       "set model.max_len to the longest sequence");
  BELLOWS_CHECK_CONFIG(o.activation == "gelu" || o.activation == "relu",
                       fmt::format("unknown transformer activation '{}'", o.activation), "use one of: gelu, relu");
}

}  // namespace

// --- one pre-LN layer ---

TransformerEncoderLayerImpl::TransformerEncoderLayerImpl(const TransformerEncoderOptions& options) : options_(options) {
  const std::int64_t d = options.d_model;
  // PyTorch's nn.MultiheadAttention: one [3d, d] input projection, Xavier-uniform, zero biases.
  auto self_attn = register_module("self_attn", std::make_shared<torch::nn::Module>("MultiheadAttention"));
  in_proj_weight_ = self_attn->register_parameter("in_proj_weight", at::empty({3 * d, d}));
  in_proj_bias_ = self_attn->register_parameter("in_proj_bias", at::zeros({3 * d}));
  out_proj_ = self_attn->register_module("out_proj", torch::nn::Linear(d, d));
  {
    at::NoGradGuard no_grad;
    torch::nn::init::xavier_uniform_(in_proj_weight_);
    out_proj_->bias.zero_();
  }
  linear1_ = register_module("linear1", torch::nn::Linear(d, options.ff));
  linear2_ = register_module("linear2", torch::nn::Linear(options.ff, d));
  norm1_ = register_module("norm1", torch::nn::LayerNorm(torch::nn::LayerNormOptions({d})));
  norm2_ = register_module("norm2", torch::nn::LayerNorm(torch::nn::LayerNormOptions({d})));
  dropout_ = register_module("dropout", torch::nn::Dropout(options.dropout));
}

at::Tensor TransformerEncoderLayerImpl::self_attention(const at::Tensor& x, const at::Tensor& attend) {
  const std::int64_t batch = x.size(0), steps = x.size(1), d = options_.d_model, heads = options_.heads;
  // [B, T, 3d] -> q, k, v as [B, heads, T, d/heads]
  const at::Tensor qkv =
      at::linear(x, in_proj_weight_, in_proj_bias_).view({batch, steps, 3, heads, d / heads}).permute({2, 0, 3, 1, 4});
  const std::optional<at::Tensor> mask = attend.defined() ? std::optional<at::Tensor>(attend) : std::nullopt;
  // ATen's attention, with its dropout drawn by models::dropout on the CPU (models/dropout.h).
  const at::Tensor out = models::scaled_dot_product_attention(qkv[0], qkv[1], qkv[2], mask, is_training() ? options_.dropout : 0.0);
  return linear(out_proj_, out.transpose(1, 2).reshape({batch, steps, d}));
}

at::Tensor TransformerEncoderLayerImpl::forward(const at::Tensor& x, const at::Tensor& attend) {
  const double p = options_.dropout;
  const bool train = is_training();
  const at::Tensor h = x + models::dropout(self_attention(norm1_->forward(x), attend), p, train);
  at::Tensor ff = linear(linear1_, norm2_->forward(h));
  // ReLU in place on the fresh linear output (its backward reads the result). ATen's fused
  // _addmm_activation has no derivative (PyTorch 2.13: "derivative for aten::_addmm_activation is not
  // implemented"), and on the CPU it is addmm followed by the same in-place activation, so it buys nothing here.
  ff = options_.activation == "relu" ? ff.relu_() : at::gelu(ff);
  return h + models::dropout(linear(linear2_, models::dropout(ff, p, train)), p, train);
}

// --- masks and positions ---

double encoder_forward_flops(const TransformerEncoderOptions& o, std::int64_t length) {
  const double rows = static_cast<double>(length), values = rows * static_cast<double>(o.d_model);
  const double layer = attention_flops(1, length, o.d_model) + linear_flops(rows, o.d_model, o.ff) + linear_flops(rows, o.ff, o.d_model) +
                       2 * norm_flops(values);
  return static_cast<double>(o.layers) * layer + norm_flops(values);
}

at::Tensor attention_mask_from_padding(const at::Tensor& padding) {
  BELLOWS_CHECK_DATA(padding.dim() == 2 && padding.scalar_type() == at::kBool,
                     fmt::format("key padding mask has shape {} and type {}; expected bool [B, T]", shape_of(padding),
                                 c10::toString(padding.scalar_type())),
                     "pass a bool mask, true at padded positions");
  at::Tensor attend = padding.logical_not();
  // A row with no key to attend to would be softmax over -inf only (NaN): let it attend to everything.
  attend = attend.logical_or(attend.any(1, /*keepdim=*/true).logical_not());
  return attend.view({padding.size(0), 1, 1, padding.size(1)});
}

at::Tensor sinusoidal_positions(std::int64_t length, std::int64_t d_model) {
  BELLOWS_CHECK_CONFIG(d_model > 0 && d_model % 2 == 0,
                       fmt::format("sinusoidal positions need an even d_model, not {}", d_model),
                       "use an even d_model");
  const at::Tensor position = at::arange(length, at::kDouble).unsqueeze(1);  // [L, 1]
  const at::Tensor inv_freq =
      at::exp(at::arange(0, d_model, 2, at::kDouble) * (-std::log(10000.0) / double(d_model)));  // [d/2]
  const at::Tensor angle = position * inv_freq;                                                  // [L, d/2]
  // Interleave: column 2i = sin, 2i+1 = cos.
  return at::stack({angle.sin(), angle.cos()}, 2).reshape({length, d_model});
}

// --- the encoder ---

TransformerEncoderImpl::TransformerEncoderImpl(const TransformerEncoderOptions& options) : options_(options) {
  check_encoder_options(options);
  if (options.positions == "sinusoidal") sinusoid_ = sinusoidal_positions(options.max_len, options.d_model);
  if (options.positions == "learned") {
    pos_embedding_ = register_parameter("pos_embedding", at::empty({options.max_len, options.d_model}));
    at::NoGradGuard no_grad;
    pos_embedding_.normal_(0.0, 0.02);
  }
  dropout_ = register_module("dropout", torch::nn::Dropout(options.dropout));
  layers_ = register_module("layers", torch::nn::ModuleList());
  for (std::int64_t i = 0; i < options.layers; ++i) {
    layer_list_.emplace_back(options);
    layers_->push_back(layer_list_.back());
  }
  norm_ = register_module("norm", torch::nn::LayerNorm(torch::nn::LayerNormOptions({options.d_model})));
}

std::vector<std::string> TransformerEncoderImpl::checkpoint_blocks() const {
  std::vector<std::string> names;
  for (std::int64_t i = 0; i < options_.layers; ++i) names.push_back(fmt::format("layers.{}", i));
  return names;
}

at::Tensor TransformerEncoderImpl::forward(const at::Tensor& x, const at::Tensor& padding) {
  BELLOWS_CHECK_DATA(
      x.dim() == 3 && x.size(2) == options_.d_model,
      fmt::format("transformer encoder input has shape {}; expected [B, T, {}]", shape_of(x), options_.d_model),
      "embed the inputs to d_model features first");
  const std::int64_t batch = x.size(0), steps = x.size(1);
  BELLOWS_CHECK_DATA(
      options_.positions == "none" || steps <= options_.max_len,
      fmt::format("a sequence of {} steps is longer than the transformer's max_len {}", steps, options_.max_len),
      fmt::format("raise model.max_len to at least {}, or shorten the sequences (data.window.length)", steps));
  if (padding.defined()) {
    BELLOWS_CHECK_DATA(padding.dim() == 2 && padding.size(0) == batch && padding.size(1) == steps,
                       fmt::format("key padding mask has shape {}, the input {}; expected [{}, {}]", shape_of(padding),
                                   shape_of(x), batch, steps),
                       "pass a bool mask [B, T], true at padded positions");
  }
  at::Tensor h = x;
  // The table follows the input to its device once (it is no buffer, so Module::to leaves it where it was made):
  // a copy from pageable host memory every step cost a transfer per step and cannot be captured in a CUDA graph.
  if (sinusoid_.defined() && sinusoid_.device() != x.device()) sinusoid_ = sinusoid_.to(x.device());
  if (sinusoid_.defined()) h = h + sinusoid_.narrow(0, 0, steps).to(x.options());
  if (pos_embedding_.defined()) h = h + pos_embedding_.narrow(0, 0, steps).to(x.scalar_type());
  h = models::dropout(h, options_.dropout, is_training());
  const at::Tensor attend = padding.defined() ? attention_mask_from_padding(padding.to(x.device())) : at::Tensor();
  for (std::size_t i = 0; i < layer_list_.size(); ++i) {
    // By value: a checkpointed block runs this again in backward, after forward returned.
    const std::shared_ptr<TransformerEncoderLayerImpl> layer = layer_list_[i].ptr();
    const BlockFunction fn = [layer, attend](const std::vector<at::Tensor>& in) {
      return std::vector<at::Tensor>{layer->forward(in[0], attend)};
    };
    h = run_block(block_name(i), *layer, fn, {h})[0];
  }
  return norm_->forward(h);
}

// --- the sequence model ---

TransformerModelImpl::TransformerModelImpl(const TransformerModelOptions& options) : options_(options) {
  BELLOWS_CHECK_CONFIG(options.in_features > 0 && options.out_features > 0,
                       fmt::format("transformer in_features={} out_features={}, expected positive", options.in_features,
                                   options.out_features),
                       "set model.in_features and model.out_features");
  BELLOWS_CHECK_CONFIG(options.pooling == "mean" || options.pooling == "last" || options.pooling == "cls",
                       fmt::format("unknown pooling '{}'", options.pooling), "use one of: mean, last, cls");
  const std::int64_t d = options.encoder.d_model;
  input_ = register_module("input", torch::nn::Linear(options.in_features, d));
  if (options.pooling == "cls") {
    cls_token_ = register_parameter("cls_token", at::empty({1, 1, d}));
    at::NoGradGuard no_grad;
    cls_token_.normal_(0.0, 0.02);
  }
  encoder_ = register_module("encoder", TransformerEncoder(options.encoder));
  head_ = register_module("head", torch::nn::Linear(d, options.out_features));
}

std::vector<std::string> TransformerModelImpl::checkpoint_blocks() const {
  std::vector<std::string> names;
  for (const auto& b : encoder_->checkpoint_blocks()) names.push_back("encoder." + b);
  return names;
}

void TransformerModelImpl::set_block_hooks(std::shared_ptr<BlockHooks> hooks, const std::string& prefix) {
  encoder_->set_block_hooks(std::move(hooks), prefix + "encoder.");
}

at::Tensor TransformerModelImpl::forward(const at::Tensor& x, const at::Tensor& lengths) {
  BELLOWS_CHECK_DATA(x.dim() == 3 && x.size(2) == options_.in_features,
                     fmt::format("transformer input has shape {}; expected [B, T, {}] (model.in_features)", shape_of(x),
                                 options_.in_features),
                     "feed windows [T, F] of the series (data.window.length > 0) with F = model.in_features");
  // The blocks selected on this model ("encoder.layers.N") are the encoder's "layers.N".
  if (checkpointed() != handed_down_) {
    std::vector<std::string> names;
    for (const auto& name : checkpointed()) names.push_back(name.substr(std::string("encoder.").size()));
    encoder_->set_checkpointed(names);
    handed_down_ = checkpointed();
  }
  const std::int64_t batch = x.size(0), steps = x.size(1);
  at::Tensor h = linear(input_, x);
  at::Tensor padding;
  if (lengths.defined()) {
    BELLOWS_CHECK_DATA(lengths.dim() == 1 && lengths.size(0) == batch,
                       fmt::format("sequence lengths have shape {}; expected [{}]", shape_of(lengths), batch),
                       "pass one length per sequence (collate's x_lengths)");
    padding = at::arange(steps, lengths.options().dtype(at::kLong).device(x.device())).unsqueeze(0) >=
              lengths.to(x.device(), at::kLong).unsqueeze(1);
  }
  if (cls_token_.defined()) {
    h = at::cat({cls_token_.to(h.scalar_type()).expand({batch, 1, h.size(2)}), h}, 1);
    if (padding.defined()) padding = at::cat({at::zeros({batch, 1}, padding.options()), padding}, 1);
  }
  const at::Tensor out = encoder_->forward(h, padding);
  const at::Tensor pooled = cls_token_.defined() ? out.select(1, 0) : pool_steps(out, lengths, options_.pooling);
  return linear(head_, pooled);
}

config::Binding<TransformerEncoderOptions> encoder_binding(const TransformerEncoderOptions& defaults) {
  using E = TransformerEncoderOptions;
  config::Binding<E> b("model.", defaults);
  b.key("d_model", &E::d_model, "model width").min(1);
  b.key("heads", &E::heads, "attention heads (dividing d_model)").min(1);
  b.key("layers", &E::layers, "encoder layers").min(1);
  b.key("ff", &E::ff, "feed-forward width").min(1);
  b.key("dropout", &E::dropout, "attention, residual and feed-forward dropout (text_pair: and the head's)").min(0).max(0.99);
  b.key("activation", &E::activation, "feed-forward activation").choices({"gelu", "relu"});
  b.key("positions", &E::positions, "position encoding").choices({"sinusoidal", "learned", "none"});
  return b;
}

namespace {

// The model.* keys of TransformerModelOptions, bound once (config/binding.h).
const config::Binding<TransformerModelOptions>& transformer_binding() {
  using O = TransformerModelOptions;
  return config::bound<O>("model.", [](config::Binding<O>& b) {
    b.key("in_features", &O::in_features, "features per time step").min(1);
    config::Binding<TransformerEncoderOptions> encoder = encoder_binding(O{}.encoder);
    encoder.key("max_len", &TransformerEncoderOptions::max_len, "longest sequence (with pooling cls: steps + 1)").min(1);
    b.nest(&O::encoder, encoder);
    b.key("pooling", &O::pooling, "sequence summary: mean over valid steps, last valid step, or a cls token")
        .choices({"mean", "last", "cls"});
    bind_sequence_head(b);
  });
}

ModelEntry transformer_entry() {
  ModelEntry e;
  e.name = "transformer";
  e.help = "pre-LN Transformer encoder over sequence windows [T, F] (W3); task: regression or classification";
  // Two narrow layers: seconds on two cores.
  e.demo = sequence_demo("model:\n  name: transformer\n  d_model: 64\n  heads: 4\n  layers: 2\n  ff: 128\n");
  e.add_keys = [](config::Schema& s) { transformer_binding().declare(s); };
  e.io = [](const config::Config& c) { return sequence_io(transformer_binding().read(c)); };
  e.forward_flops = [](const config::Config& c, const ModelContext& context) -> std::optional<double> {
    if (!context.train || context.train->size() == 0) return std::nullopt;  // the steps come from the data
    const at::Tensor x = data::first_sample(*context.train).at("x");
    if (x.dim() != 3) return std::nullopt;
    const TransformerModelOptions o = transformer_binding().read(c);
    const std::int64_t steps = x.size(1), tokens = steps + (o.pooling == "cls" ? 1 : 0);
    return linear_flops(static_cast<double>(steps), o.in_features, o.encoder.d_model) + encoder_forward_flops(o.encoder, tokens) +
           linear_flops(1, o.encoder.d_model, o.out_features);
  };
  e.build = [](const config::Config& c, const ModelContext& context) {
    const TransformerModelOptions o = transformer_binding().read(c);
    const std::int64_t steps =
        check_sequence_data(c, context, "transformer", {o.in_features, o.out_features, o.task}) + (o.pooling == "cls" ? 1 : 0);
    BELLOWS_CHECK_CONFIG(
        o.encoder.positions == "none" || steps <= o.encoder.max_len,
        fmt::format("model.max_len is {} ({}) but the data's sequences have {} steps{}", o.encoder.max_len,
                    c.origin("model.max_len").str(), steps, o.pooling == "cls" ? " (with the cls token)" : ""),
        fmt::format("set model.max_len to at least {}, or shorten data.window.length", steps));
    auto module = std::make_shared<TransformerModelImpl>(o);
    SequenceForward forward = [](torch::nn::Module& m, const at::Tensor& x, const at::Tensor& lengths) {
      return static_cast<TransformerModelImpl&>(m).forward(x, lengths);
    };
    return BuiltModel{module, make_sequence_task(forward, o.task)};
  };
  return e;
}

const ModelRegistrar kTransformerRegistered(transformer_entry());

}  // namespace

}  // namespace bellows::models
