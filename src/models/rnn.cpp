// The LSTM/GRU sequence models and what the sequence models share; see rnn.h.
#include "bellows/models/rnn.h"

#include "bellows/models/flops.h"

#include <ATen/ATen.h>
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <torch/nn/utils/rnn.h>

#include "bellows/data/batch.h"
#include "bellows/util/check.h"
#include "bellows/util/format.h"  // defines: shape_of

namespace bellows::models {
namespace {

// Regression and classification over (x, lengths); the losses and metrics are those of tasks.cpp.
class SequenceTask final : public Task {
 public:
  SequenceTask(SequenceForward forward, bool classification)
      : forward_(std::move(forward)), classification_(classification) {}

  StepOutput step(torch::nn::Module& model, const data::Batch& batch) override {
    const auto lengths_it = batch.tensors.find("x_lengths");
    const at::Tensor lengths = lengths_it == batch.tensors.end() ? at::Tensor() : lengths_it->second;
    const at::Tensor pred = forward_(model, batch.at("x"), lengths);
    StepOutput out;
    if (classification_) {
      const at::Tensor logits = pred.to(at::kFloat);
      const at::Tensor target = batch.at("y").to(at::kLong).view({-1});
      out.loss = at::cross_entropy_loss(logits, target);
      out.metrics.emplace_back("accuracy", logits.detach().argmax(1).eq(target).to(at::kFloat).mean());
    } else {
      const at::Tensor target = batch.at("y").to(pred.scalar_type()).view_as(pred);
      const at::Tensor diff = pred.to(at::kFloat) - target.to(at::kFloat);
      out.loss = diff.square().mean();
      out.metrics.emplace_back("mae", diff.detach().abs().mean());
    }
    return out;
  }
  std::string monitor() const override { return classification_ ? "accuracy" : "loss"; }
  bool lower_is_better() const override { return !classification_; }

 private:
  SequenceForward forward_;
  bool classification_;
};

}  // namespace

// --- shared by the sequence models ---

std::shared_ptr<Task> make_sequence_task(SequenceForward forward, const std::string& task) {
  BELLOWS_CHECK_CONFIG(task == "regression" || task == "classification", fmt::format("unknown task '{}'", task),
                       "set model.task to regression or classification");
  return std::make_shared<SequenceTask>(std::move(forward), task == "classification");
}

ModelDemo sequence_demo(const std::string& model_block) {
  // No model.in_features: the run takes it from the data.
  const std::string data = R"(data:
  source: synthetic
  kind: sequences
  samples: 2048
  steps: 16
  features: 8
  batch_size: 64
  val_fraction: 0.1
)";
  return ModelDemo{data + model_block,
                   "synthetic sequences (16 steps x 8 features -> 1 regression target, 2048 samples)"};
}

at::Tensor pool_steps(const at::Tensor& h, const at::Tensor& lengths, const std::string& pooling) {
  BELLOWS_CHECK(h.dim() == 3, fmt::format("pooling steps of a tensor of shape {}; expected [B, T, C]", shape_of(h)),
                "report this bug");
  BELLOWS_CHECK_CONFIG(pooling == "last" || pooling == "mean", fmt::format("unknown pooling '{}'", pooling),
                       "use one of: last, mean");
  const std::int64_t batch = h.size(0), steps = h.size(1), channels = h.size(2);
  if (!lengths.defined()) return pooling == "last" ? h.select(1, steps - 1) : h.mean(1);
  const at::Tensor n = lengths.to(h.device(), at::kLong).clamp(1, steps);
  if (pooling == "last") return h.gather(1, (n - 1).view({batch, 1, 1}).expand({batch, 1, channels})).squeeze(1);
  const at::Tensor valid = at::arange(steps, n.options()).unsqueeze(0) < n.unsqueeze(1);  // [B, T]
  return h.masked_fill(valid.logical_not().unsqueeze(2), 0).sum(1) / n.to(h.scalar_type()).unsqueeze(1);
}

std::int64_t check_sequence_data(const config::Config& c, const ModelContext& context, const std::string& model,
                                 const SequenceHead& head) {
  if (!context.train || context.train->size() == 0) return 0;
  const data::Dataset& train = *context.train;
  const data::Batch one = data::first_sample(train);
  const at::Tensor& x = one.at("x");
  BELLOWS_CHECK_CONFIG(x.dim() == 3,
                       fmt::format("model {} needs sequences [T, F], but a sample's x has shape {} ({})", model,
                                   shape_of(x[0]), train.name()),
                       "read the series as sliding windows: set data.window.length (and data.window.horizon)");
  const std::int64_t in_features = head.in_features;
  BELLOWS_CHECK_CONFIG(
      in_features == x.size(2),
      fmt::format("model.in_features is {} ({}) but the data's sequences have {} features: x {} ({})", in_features,
                  c.origin("model.in_features").str(), x.size(2), shape_of(x[0]), train.name()),
      fmt::format("set model.in_features: {}", x.size(2)));
  const std::int64_t out_features = head.out_features;
  const auto y_it = one.tensors.find("y");
  BELLOWS_CHECK_CONFIG(y_it != one.tensors.end(),
                       fmt::format("model {} needs targets y, but {} has none", model, train.name()),
                       "give the series a horizon (data.window.horizon >= 1) or a y array/column");
  const at::Tensor y = y_it->second[0];
  if (head.task == "classification") {
    BELLOWS_CHECK_CONFIG(
        y.numel() == 1,
        fmt::format("model.task is classification but a sample's y has shape {}: not one class index ({})", shape_of(y),
                    train.name()),
        "classify with one integer label per sequence, or set model.task: regression");
    BELLOWS_CHECK_CONFIG(out_features >= 2,
                         fmt::format("model.out_features is {} ({}); classification needs one output per class",
                                     out_features, c.origin("model.out_features").str()),
                         "set model.out_features to the number of classes");
  } else {
    BELLOWS_CHECK_CONFIG(
        out_features == y.numel(),
        fmt::format("model.out_features is {} ({}) but a sample's y has shape {} = {} values ({})", out_features,
                    c.origin("model.out_features").str(), shape_of(y), y.numel(), train.name()),
        fmt::format(
            "set model.out_features: {} (regression predicts every target value: window horizon x target columns)",
            y.numel()));
  }
  return x.size(1);
}

// --- the recurrent model ---

RnnModelImpl::RnnModelImpl(const RnnOptions& options) : options_(options) {
  BELLOWS_CHECK_CONFIG(options.cell == "lstm" || options.cell == "gru",
                       fmt::format("unknown recurrent cell '{}'", options.cell), "use lstm or gru");
  BELLOWS_CHECK_CONFIG(
      options.in_features > 0 && options.hidden_size > 0 && options.num_layers > 0 && options.out_features > 0,
      fmt::format("{} in_features={} hidden_size={} num_layers={} out_features={}, expected positive", options.cell,
                  options.in_features, options.hidden_size, options.num_layers, options.out_features),
      "set model.in_features, model.hidden_size, model.num_layers and model.out_features");
  BELLOWS_CHECK_CONFIG(options.dropout >= 0 && options.dropout < 1,
                       fmt::format("dropout {} outside [0, 1)", options.dropout), "set model.dropout between 0 and 1");
  BELLOWS_CHECK_CONFIG(options.pooling == "last" || options.pooling == "mean",
                       fmt::format("unknown pooling '{}'", options.pooling), "use one of: last, mean");
  if (options.cell == "lstm") {
    lstm_ = register_module("rnn", torch::nn::LSTM(torch::nn::LSTMOptions(options.in_features, options.hidden_size)
                                                       .num_layers(options.num_layers)
                                                       .dropout(options.dropout)
                                                       .bidirectional(options.bidirectional)
                                                       .batch_first(true)));
  } else {
    gru_ = register_module("rnn", torch::nn::GRU(torch::nn::GRUOptions(options.in_features, options.hidden_size)
                                                     .num_layers(options.num_layers)
                                                     .dropout(options.dropout)
                                                     .bidirectional(options.bidirectional)
                                                     .batch_first(true)));
  }
  const std::int64_t directions = options.bidirectional ? 2 : 1;
  head_ = register_module("head", torch::nn::Linear(options.hidden_size * directions, options.out_features));
}

std::pair<at::Tensor, at::Tensor> RnnModelImpl::run(const at::Tensor& x, const at::Tensor& lengths) {
  const std::int64_t batch = x.size(0), steps = x.size(1);
  const std::int64_t directions = options_.bidirectional ? 2 : 1;
  // The last layer's final states, [directions, B, H] -> [B, directions * H] (forward, then backward).
  auto last_layer = [&](const at::Tensor& h) {
    return h.view({options_.num_layers, directions, batch, options_.hidden_size})
        .select(0, options_.num_layers - 1)
        .transpose(0, 1)
        .reshape({batch, directions * options_.hidden_size});
  };
  if (!lengths.defined()) {
    if (lstm_) {
      auto [out, state] = lstm_->forward(x);
      return {out, last_layer(std::get<0>(state))};
    }
    auto [out, h] = gru_->forward(x);
    return {out, last_layer(h)};
  }
  // Packed: the recurrence runs over each sequence's valid steps only; LibTorch restores the batch order.
  BELLOWS_CHECK_DATA(lengths.dim() == 1 && lengths.size(0) == batch,
                     fmt::format("sequence lengths have shape {}; expected [{}]", shape_of(lengths), batch),
                     "pass one length per sequence (collate's x_lengths)");
  const at::Tensor n = lengths.to(at::kCPU, at::kLong).clamp(1, steps);
  const auto packed = torch::nn::utils::rnn::pack_padded_sequence(x, n, /*batch_first=*/true, /*enforce_sorted=*/false);
  auto finish = [&](const torch::nn::utils::rnn::PackedSequence& packed_out, const at::Tensor& h_n) {
    const at::Tensor outputs =
        std::get<0>(torch::nn::utils::rnn::pad_packed_sequence(packed_out, /*batch_first=*/true, 0.0, steps));
    return std::pair<at::Tensor, at::Tensor>{outputs, last_layer(h_n)};
  };
  if (lstm_) {
    auto [out, state] = lstm_->forward_with_packed_input(packed);
    return finish(out, std::get<0>(state));
  }
  auto [out, h] = gru_->forward_with_packed_input(packed);
  return finish(out, h);
}

at::Tensor RnnModelImpl::forward(const at::Tensor& x, const at::Tensor& lengths) {
  BELLOWS_CHECK_DATA(x.dim() == 3 && x.size(2) == options_.in_features,
                     fmt::format("{} input has shape {}; expected [B, T, {}] (model.in_features)", options_.cell,
                                 shape_of(x), options_.in_features),
                     "feed windows [T, F] of the series (data.window.length > 0) with F = model.in_features");
  auto [outputs, last] = run(x, lengths);
  const at::Tensor pooled = options_.pooling == "last" ? last : pool_steps(outputs, lengths, "mean");
  return head_->forward(pooled);
}

namespace {

// The model.* keys of RnnOptions (both cells), bound once (config/binding.h); the cell is the model's name.
const config::Binding<RnnOptions>& rnn_binding() {
  using O = RnnOptions;
  return config::bound<O>("model.", [](config::Binding<O>& b) {
    b.key("in_features", &O::in_features, "features per time step").min(1);
    b.key("hidden_size", &O::hidden_size, "recurrent state width").min(1);
    b.key("num_layers", &O::num_layers, "stacked recurrent layers").min(1);
    b.key("bidirectional", &O::bidirectional, "also run each layer backwards in time");
    b.key("dropout", &O::dropout, "dropout between recurrent layers").min(0).max(0.99);
    b.key("pooling", &O::pooling, "sequence summary: last valid step, or mean over valid steps").choices({"last", "mean"});
    bind_sequence_head(b);
  });
}

ModelEntry rnn_entry(const std::string& cell) {
  ModelEntry e;
  e.name = cell;
  e.help = fmt::format(
      "{} over sequence windows [T, F] (W2), pooled (last or mean) into a linear head; task: regression or "
      "classification",
      cell == "lstm" ? "multi-layer LSTM" : "multi-layer GRU");
  // The model's defaults (two layers of 128) are fast enough.
  e.demo = sequence_demo(fmt::format("model:\n  name: {}\n", cell));
  e.add_keys = [](config::Schema& s) { rnn_binding().declare(s); };
  e.io = [](const config::Config& c) { return sequence_io(rnn_binding().read(c)); };
  e.forward_flops = [cell](const config::Config& c, const ModelContext& context) -> std::optional<double> {
    if (!context.train || context.train->size() == 0) return std::nullopt;  // the steps come from the data
    const at::Tensor x = data::first_sample(*context.train).at("x");
    if (x.dim() != 3) return std::nullopt;
    const RnnOptions o = rnn_binding().read(c);
    return recurrent_flops(x.size(1), o.in_features, o.hidden_size, o.num_layers, o.bidirectional, cell == "lstm" ? 4 : 3) +
           linear_flops(1, o.hidden_size * (o.bidirectional ? 2 : 1), o.out_features);
  };
  e.build = [cell](const config::Config& c, const ModelContext& context) {
    RnnOptions o = rnn_binding().read(c);
    check_sequence_data(c, context, cell, {o.in_features, o.out_features, o.task});
    o.cell = cell;
    auto module = std::make_shared<RnnModelImpl>(o);
    SequenceForward forward = [](torch::nn::Module& m, const at::Tensor& x, const at::Tensor& lengths) {
      return static_cast<RnnModelImpl&>(m).forward(x, lengths);
    };
    return BuiltModel{module, make_sequence_task(forward, o.task)};
  };
  return e;
}

const ModelRegistrar kRegisteredLstm(rnn_entry("lstm"));
const ModelRegistrar kRegisteredGru(rnn_entry("gru"));

}  // namespace

}  // namespace bellows::models
