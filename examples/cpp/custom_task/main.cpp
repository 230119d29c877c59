// A C++ program training its own model with its own Task through bellows' Trainer: a linear model learns
// y = 3x - 1 from noisy samples, with AdamW, a cosine schedule, clipping and the console progress output.
#include <bellows/data/tensor_source.h>
#include <bellows/obs/console_sink.h>
#include <bellows/train/trainer.h>

#include <ATen/ATen.h>
#include <torch/nn/modules/linear.h>

#include <iostream>

// The model: any torch::nn::Module.
struct Line : torch::nn::Module {
  torch::nn::Linear fc{nullptr};
  Line() { fc = register_module("fc", torch::nn::Linear(1, 1)); }
};

// The task: how a batch becomes a loss (and optional metrics).
struct FitLine : bellows::Task {
  bellows::StepOutput step(torch::nn::Module& model, const bellows::data::Batch& batch) override {
    auto& line = static_cast<Line&>(model);
    const at::Tensor pred = line.fc->forward(batch.at("x"));
    bellows::StepOutput out;
    out.loss = at::mse_loss(pred, batch.at("y"));
    out.metrics.emplace_back("abs_err", (pred - batch.at("y")).abs().mean().detach());
    return out;
  }
};

int main() {
  at::manual_seed(0);
  const at::Tensor x = at::rand({2048, 1}) * 4 - 2;
  const at::Tensor y = 3 * x - 1 + 0.01 * at::randn({2048, 1});
  bellows::data::TensorSource source({{"x", x}, {"y", y}}, {.batch_size = 64, .shuffle = true, .drop_last = false, .seed = 0});

  bellows::train::TrainerOptions options;
  options.epochs = 20;
  options.optimizer.lr = 0.05;
  options.schedule.type = "cosine";
  options.clip_max_norm = 10;
  options.log_every_n_steps = 100;
  auto model = std::make_shared<Line>();
  bellows::train::Trainer trainer(model, std::make_shared<FitLine>(), options);
  trainer.add_sink(std::make_shared<bellows::obs::ConsoleSink>());
  const auto result = trainer.fit(source);

  const double w = model->fc->weight.item<double>(), b = model->fc->bias.item<double>();
  std::cout << "learned y = " << w << " x + " << b << " after " << result.steps << " steps\n";
  return std::abs(w - 3) < 0.05 && std::abs(b + 1) < 0.05 ? 0 : 1;  // the example checks itself
}
