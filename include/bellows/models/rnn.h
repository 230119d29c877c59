// Recurrent sequence models (workload W2): a multi-layer LSTM or GRU over windows [B, T, F], pooled to one
// vector per sequence (the last valid step, or the mean over valid steps) and a linear head. Registered as
// "lstm" and "gru". Also here: what every sequence model shares (lstm, gru, transformer): the task that hands
// the batch's "x_lengths" of padded variable-length sequences to the model, pooling over valid steps, and the
// check of the model's widths against the data.
#pragma once

#include <ATen/core/Tensor.h>
#include <torch/nn/module.h>
#include <torch/nn/modules/linear.h>
#include <torch/nn/modules/rnn.h>
#include <torch/nn/pimpl.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>

#include "bellows/config/binding.h"   // defines: Binding
#include "bellows/config/schema.h"    // defines: Schema, Config
#include "bellows/models/registry.h"  // defines: ModelContext, ModelDemo
#include "bellows/models/task.h"      // defines: Task

namespace bellows::models {

struct RnnOptions {
  std::string cell = "lstm";  // lstm | gru
  std::int64_t in_features = 16;
  std::int64_t hidden_size = 128;
  std::int64_t num_layers = 2;
  bool bidirectional = false;
  double dropout = 0.0;          // between recurrent layers (not after the last)
  std::string pooling = "last";  // last | mean
  std::int64_t out_features = 1;
  std::string task = "regression";  // regression | classification: the task that trains it (not the module's)
};

// Modules: "rnn" (torch::nn::LSTM or GRU, batch-first; PyTorch's parameter names weight_ih_l0, ...) and
// "head" (Linear(hidden_size * directions, out_features)).
class RnnModelImpl : public torch::nn::Module {
 public:
  explicit RnnModelImpl(const RnnOptions& options);
  // x: [B, T, in_features]; lengths: int64 [B] valid steps of padded sequences (undefined: all T valid).
  // Padded sequences are packed (torch::nn::utils::rnn), so padding never reaches the recurrence. Pooling
  // "last" takes the final hidden state of the last layer: after the last valid step (bidirectional: joined
  // with the backward direction's state after it read the sequence back to step 0); "mean" averages the last
  // layer's outputs over the valid steps. A length of 0 counts as 1. Returns [B, out_features].
  at::Tensor forward(const at::Tensor& x, const at::Tensor& lengths = {});
  const RnnOptions& options() const { return options_; }

 private:
  // The last layer's outputs [B, T, H * directions] (zeros at padded steps) and its final states [B, H * directions].
  std::pair<at::Tensor, at::Tensor> run(const at::Tensor& x, const at::Tensor& lengths);
  RnnOptions options_;
  torch::nn::LSTM lstm_{nullptr};
  torch::nn::GRU gru_{nullptr};
  torch::nn::Linear head_{nullptr};
};
TORCH_MODULE(RnnModel);

// --- shared by the sequence models (lstm, gru, transformer) ---

// forward(model, x [B, T, F], lengths int64 [B] or undefined) -> predictions [B, out_features].
using SequenceForward = std::function<at::Tensor(torch::nn::Module&, const at::Tensor& x, const at::Tensor& lengths)>;

// The tasks of tasks.h (regression: MSE loss, MAE metric, y viewed as the prediction's shape, e.g. [B, H, C]
// windows of H steps x C targets against [B, H*C]; classification: cross-entropy, accuracy) for sequence
// models: the batch's "x_lengths" (collate's lengths of padded sequences; absent for fixed-length windows) go
// to the model with x. `task`: regression | classification.
std::shared_ptr<Task> make_sequence_task(SequenceForward forward, const std::string& task);

// The sequence models' head keys, bound to the options' fields (in a binding with the prefix "model."):
// model.out_features and model.task (regression | classification, which picks the task).
template <class Options>
void bind_sequence_head(config::Binding<Options>& binding) {
  binding.key("out_features", &Options::out_features, "outputs (regression: horizon x target columns; classification: classes)").min(1);
  binding.key("task", &Options::task, "training objective").choices({"regression", "classification"});
}

// A sequence model's ModelEntry::io: its in_features, out_features and task.
template <class Options>
ModelIo sequence_io(const Options& options) {
  return ModelIo{options.in_features, options.out_features, std::nullopt, options.task};
}

// The embedded demo of a sequence model (ModelEntry::demo): synthetic sequences of 16 steps x 8 features -> 1
// regression target, 2048 samples in batches of 64 (model.in_features is the data's), with `model_block`, the YAML of
// the model: block (its name and sizes).
ModelDemo sequence_demo(const std::string& model_block);

// Pools [B, T, C] over steps to [B, C]: "last" (step lengths-1) or "mean" (over the first `lengths` steps,
// masked, so padded values never matter). Undefined lengths: all T steps are valid; lengths clamp to [1, T].
at::Tensor pool_steps(const at::Tensor& h, const at::Tensor& lengths, const std::string& pooling);

// The configured model.in_features, model.out_features and model.task, as check_sequence_data takes them.
struct SequenceHead {
  std::int64_t in_features = 0;
  std::int64_t out_features = 0;
  std::string task;
};

// Checks model.in_features, model.out_features and model.task (`head`, as configured in `config`, which says where
// they were set) against one sample of the training data (when the context has data): x must be a sequence
// [T, model.in_features] (data.window.length > 0), and a regression sample's y must hold model.out_features values
// (horizon x target columns), a classification sample's y one class index. kConfig errors name the key and the
// data's shapes. Returns the sample's T (0 without data).
std::int64_t check_sequence_data(const config::Config& config, const ModelContext& context, const std::string& model,
                                 const SequenceHead& head);

}  // namespace bellows::models
