// The text-pair classifier (workload W7, seed 004): token and segment embeddings and the shared Transformer
// encoder form the submodule "encoder"; the sequence is pooled ([CLS] position, or the mean over real tokens)
// and a linear head gives class logits. The encoder can be frozen (model.freeze_encoder, or train.freeze:
// ["encoder.*"]) and loaded from a safetensors file by name (model.encoder_weights), the seed's workflow of a
// pretrained, frozen encoder under a trained head.
//
// A frozen encoder (every parameter under "encoder." without requires_grad) is a fixed feature extractor: it
// runs without autograd and stays in eval mode (no dropout) while the head trains.
#pragma once

#include <ATen/core/Tensor.h>
#include <torch/nn/module.h>
#include <torch/nn/modules/dropout.h>
#include <torch/nn/modules/embedding.h>
#include <torch/nn/modules/linear.h>
#include <torch/nn/pimpl.h>

#include <cstdint>
#include <filesystem>
#include <set>
#include <string>
#include <vector>

#include "bellows/models/activation_checkpoint.h"  // defines: Checkpointable
#include "bellows/models/transformer.h"            // defines: TransformerEncoder, TransformerEncoderOptions

namespace bellows::models {

struct TextPairOptions {
  std::int64_t vocab_size = 8000;
  std::int64_t pad_id = 0;           // its embedding row is zero and gets no gradient
  std::int64_t num_classes = 3;
  std::string pooling = "cls";       // cls (the output at position 0, [CLS]) | mean (over real tokens)
  TransformerEncoderOptions encoder = {256, 4, 4, 1024, 0.1, "learned", 128, "gelu"};
};

// "encoder": token_embedding [vocab, d], segment_embedding [2, d], transformer (TransformerEncoder).
class TextEncoderImpl : public torch::nn::Module {
 public:
  explicit TextEncoderImpl(const TextPairOptions& options);
  // tokens, segments: int64 [B, T]. Returns the summed embeddings [B, T, d_model].
  at::Tensor embed(const at::Tensor& tokens, const at::Tensor& segments);
  // embedded: [B, T, d_model]; mask: bool [B, T], true at real tokens (undefined: all). Returns [B, T, d_model].
  at::Tensor encode(const at::Tensor& embedded, const at::Tensor& mask);
  TransformerEncoder& transformer() { return transformer_; }
  const TransformerEncoder& transformer() const { return transformer_; }

 private:
  torch::nn::Embedding token_embedding_{nullptr}, segment_embedding_{nullptr};
  TransformerEncoder transformer_{nullptr};
};
TORCH_MODULE(TextEncoder);

// Blocks for activation checkpointing: "encoder.transformer.layers.0", ... (handed down to the encoder).
class TextPairClassifierImpl : public torch::nn::Module, public Checkpointable {
 public:
  explicit TextPairClassifierImpl(const TextPairOptions& options);
  // tokens: int64 [B, T]; segments: int64 [B, T] (undefined: all 0); mask: bool [B, T], true at real tokens
  // (undefined: all real). Returns logits [B, num_classes].
  at::Tensor forward(const at::Tensor& tokens, const at::Tensor& segments = {}, const at::Tensor& mask = {});
  // The same after the embeddings: embedded [B, T, d_model] (a float input path, e.g. for gradient checks).
  at::Tensor forward_embedded(const at::Tensor& embedded, const at::Tensor& mask = {});

  // Every encoder parameter is frozen (requires_grad false).
  bool encoder_frozen() const;
  void freeze_encoder();
  // Keeps a frozen encoder in eval mode.
  void train(bool on = true) override;

  std::vector<std::string> checkpoint_blocks() const override;
  void set_block_hooks(std::shared_ptr<BlockHooks> hooks, const std::string& prefix = "") override;  // the encoder's
  const TextPairOptions& options() const { return options_; }
  TextEncoder& encoder() { return encoder_; }

 private:
  at::Tensor pool_and_classify(const at::Tensor& encoded, const at::Tensor& mask);
  TextPairOptions options_;
  TextEncoder encoder_{nullptr};
  torch::nn::Dropout dropout_{nullptr};
  torch::nn::Linear head_{nullptr};
  std::set<std::string> handed_down_;  // the checkpointed blocks last given to the encoder
};
TORCH_MODULE(TextPairClassifier);

// model.encoder_weights: the registry entry asks app/ to import a safetensors file into the encoder by name
// (models::WeightImport with prefix "encoder."; app::import_weights), relative or "encoder."-prefixed names.

}  // namespace bellows::models
