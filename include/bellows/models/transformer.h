// Transformer encoder (workloads W3 and W7): pre-LN layers with multi-head self-attention through ATen's
// scaled-dot-product attention (at::scaled_dot_product_attention: flash/memory-efficient kernels where the
// device has them), learned or sinusoidal positions, and key padding masks. The encoder is shared by the
// sequence model "transformer" and the text-pair classifier "text_pair".
#pragma once

#include <ATen/core/Tensor.h>
#include <torch/nn/module.h>
#include <torch/nn/modules/container/modulelist.h>
#include <torch/nn/modules/dropout.h>
#include <torch/nn/modules/linear.h>
#include <torch/nn/modules/normalization.h>
#include <torch/nn/pimpl.h>

#include <cstdint>
#include <set>
#include <string>
#include <vector>

#include "bellows/config/binding.h"                // defines: Binding
#include "bellows/config/schema.h"                 // defines: Schema, Config
#include "bellows/models/activation_checkpoint.h"  // defines: Checkpointable

namespace bellows::models {

struct TransformerEncoderOptions {
  std::int64_t d_model = 256;
  std::int64_t heads = 4;
  std::int64_t layers = 4;
  std::int64_t ff = 1024;                // feed-forward width
  double dropout = 0.1;                  // attention, residual and feed-forward dropout
  std::string positions = "sinusoidal";  // sinusoidal | learned | none
  std::int64_t max_len = 512;            // longest sequence (learned positions are this many)
  std::string activation = "gelu";       // gelu | relu
};

// The encoder's model.* keys, shared by the models "transformer" and "text_pair": d_model, heads, layers, ff,
// dropout, activation and positions, with the defaults of the model's encoder `defaults` (their positions
// differ). max_len is bound by each model: its default and meaning differ.
config::Binding<TransformerEncoderOptions> encoder_binding(const TransformerEncoderOptions& defaults);

// The encoder's analytic forward FLOPs for one sequence of `length` tokens (models/flops.h): per layer the
// self-attention, the feed-forward's two Linear layers and two LayerNorms; then the final LayerNorm.
double encoder_forward_flops(const TransformerEncoderOptions& options, std::int64_t length);

// One pre-LN layer: x + Dropout(SelfAttention(LN(x))), then x + Dropout(FF(LN(x))). Parameter names follow
// PyTorch's nn.TransformerEncoderLayer (self_attn.in_proj_weight, self_attn.out_proj, linear1, linear2, norm1,
// norm2), so torch.nn.TransformerEncoder(norm_first=True) loads the same safetensors file.
class TransformerEncoderLayerImpl : public torch::nn::Module {
 public:
  explicit TransformerEncoderLayerImpl(const TransformerEncoderOptions& options);
  // x: [B, T, d_model]; attend: bool, broadcastable to [B, heads, T, T], true where a query may attend to a
  // key (undefined: everywhere).
  at::Tensor forward(const at::Tensor& x, const at::Tensor& attend = {});

 private:
  at::Tensor self_attention(const at::Tensor& x, const at::Tensor& attend);
  TransformerEncoderOptions options_;
  at::Tensor in_proj_weight_, in_proj_bias_;  // registered under "self_attn."
  torch::nn::Linear out_proj_{nullptr};
  torch::nn::Linear linear1_{nullptr}, linear2_{nullptr};
  torch::nn::LayerNorm norm1_{nullptr}, norm2_{nullptr};
  torch::nn::Dropout dropout_{nullptr};
};
TORCH_MODULE(TransformerEncoderLayer);

// The attention mask of at::scaled_dot_product_attention from a key padding mask ([B, T] bool, true at
// padded positions): [B, 1, 1, T] bool, true where keys may be attended to. A sequence that is padding
// throughout attends to all its keys, so its (meaningless) outputs stay finite instead of NaN.
at::Tensor attention_mask_from_padding(const at::Tensor& padding);

// The sinusoidal position table [length, d_model] (float64): sin(p / 10000^(2i/d)) at column 2i and cos of
// the same at column 2i+1 (Vaswani et al. 2017). d_model must be even.
at::Tensor sinusoidal_positions(std::int64_t length, std::int64_t d_model);

// Blocks for activation checkpointing: "layers.0", "layers.1", ...
class TransformerEncoderImpl : public torch::nn::Module, public Checkpointable {
 public:
  explicit TransformerEncoderImpl(const TransformerEncoderOptions& options);
  // x: [B, T, d_model] embedded inputs; padding: [B, T] bool, true at padded positions (undefined: none).
  // Adds the positions, runs the layers, applies the final LayerNorm: [B, T, d_model].
  at::Tensor forward(const at::Tensor& x, const at::Tensor& padding = {});
  std::vector<std::string> checkpoint_blocks() const override;
  const TransformerEncoderOptions& options() const { return options_; }

 private:
  TransformerEncoderOptions options_;
  at::Tensor sinusoid_;       // [max_len, d_model] float64, not a parameter (not saved): sinusoidal positions,
                              // moved to the input's device at the first forward there
  at::Tensor pos_embedding_;  // [max_len, d_model] parameter "pos_embedding": learned positions
  torch::nn::Dropout dropout_{nullptr};
  torch::nn::ModuleList layers_{nullptr};
  std::vector<TransformerEncoderLayer> layer_list_;
  torch::nn::LayerNorm norm_{nullptr};
};
TORCH_MODULE(TransformerEncoder);

// The sequence model "transformer" (W3): windows [B, T, in_features] -> Linear(in_features, d_model) -> the
// encoder -> pooling -> Linear(d_model, out_features).
struct TransformerModelOptions {
  std::int64_t in_features = 16;
  std::int64_t out_features = 1;
  std::string pooling = "mean";  // mean (over valid steps) | last (valid step) | cls (a learned token first)
  TransformerEncoderOptions encoder;
  std::string task = "regression";  // regression | classification: the task that trains it (not the module's)
};

// Blocks for activation checkpointing: "encoder.layers.0", ... (handed down to the encoder).
class TransformerModelImpl : public torch::nn::Module, public Checkpointable {
 public:
  explicit TransformerModelImpl(const TransformerModelOptions& options);
  // x: [B, T, in_features]; lengths: int64 [B] valid steps per sequence (undefined: all T). Returns
  // [B, out_features].
  at::Tensor forward(const at::Tensor& x, const at::Tensor& lengths = {});
  std::vector<std::string> checkpoint_blocks() const override;
  void set_block_hooks(std::shared_ptr<BlockHooks> hooks, const std::string& prefix = "") override;  // the encoder's
  const TransformerModelOptions& options() const { return options_; }
  TransformerEncoder& encoder() { return encoder_; }

 private:
  TransformerModelOptions options_;
  torch::nn::Linear input_{nullptr};
  at::Tensor cls_token_;  // [1, 1, d_model], pooling cls only
  TransformerEncoder encoder_{nullptr};
  torch::nn::Linear head_{nullptr};
  std::set<std::string> handed_down_;  // the checkpointed blocks last given to the encoder
};
TORCH_MODULE(TransformerModel);

}  // namespace bellows::models
