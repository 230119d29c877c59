// Helpers shared by the model tests: one intra-op thread for a test, gradients against central differences,
// and building a registered model from YAML the way `bellows train` does.
#pragma once

#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <gtest/gtest.h>
#include <torch/csrc/autograd/autograd.h>
#include <torch/optim/optimizer.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "bellows/app/model_setup.h"
#include "bellows/app/run_settings.h"
#include "bellows/config/schema.h"
#include "bellows/data/build.h"
#include "bellows/data/batch.h"
#include "bellows/models/registry.h"
#include "bellows/models/task.h"
#include "bellows/models/transformer.h"

namespace bellows::test_support {

// One intra-op thread for the duration of a test, then the previous count again. For tests of many tiny ops:
// two threads gain nothing at these sizes, and on a loaded 2-core machine OpenMP's spinning barriers between
// them made the learning tests 20-50x slower (e.g. 130 s against 2.6 s for the LSTM/GRU test).
class OneThread {
 public:
  OneThread() : saved_(at::get_num_threads()) { at::set_num_threads(1); }
  ~OneThread() { at::set_num_threads(saved_); }
  OneThread(const OneThread&) = delete;
  OneThread& operator=(const OneThread&) = delete;

 private:
  int saved_;
};

// Autograd's gradients of the scalar f() against central differences (f(p+h) - f(p-h)) / 2h with h = 1e-6, at
// the flat elements `chosen[i]` of tensor i (missing or empty: `samples` evenly spaced ones). The tensors are
// float64 leaves, changed in place and restored. Agreement within 1e-6 x max(1, |numeric|). Returns the
// largest |analytic gradient| compared, so a caller can check that the comparison was not between zeros.
inline double expect_gradients_match(const std::function<at::Tensor()>& f, const std::vector<at::Tensor>& tensors,
                                     int samples, const std::vector<std::vector<std::int64_t>>& chosen = {}) {
  const double h = 1e-6;
  const std::vector<at::Tensor> grads = torch::autograd::grad({f()}, tensors, {}, false, false, /*allow_unused=*/true);
  double largest = 0;
  for (std::size_t i = 0; i < tensors.size(); ++i) {
    at::Tensor flat = tensors[i].view({-1});
    const at::Tensor grad = grads[i].defined() ? grads[i].reshape({-1}) : at::zeros_like(flat);
    std::vector<std::int64_t> elements = i < chosen.size() ? chosen[i] : std::vector<std::int64_t>{};
    for (int k = 0; elements.empty() && k < samples; ++k) elements.push_back(k * flat.numel() / samples);
    for (const std::int64_t j : elements) {
      at::NoGradGuard no_grad;
      const double v = flat[j].item<double>();
      flat[j].fill_(v + h);
      const double plus = f().item<double>();
      flat[j].fill_(v - h);
      const double minus = f().item<double>();
      flat[j].fill_(v);
      const double numeric = (plus - minus) / (2 * h);
      const double analytic = grad[j].item<double>();
      EXPECT_NEAR(analytic, numeric, 1e-6 * std::max(1.0, std::abs(numeric))) << "tensor " << i << " element " << j;
      largest = std::max(largest, std::abs(analytic));
    }
  }
  return largest;
}

// What a run hands a model about `train`: the dataset and its source's facts (classes, grid, vocabulary).
inline models::ModelContext context_of(std::shared_ptr<const data::Dataset> train) {
  data::DataFacts facts = train ? data::facts_of(*train) : data::DataFacts{};
  return models::ModelContext{std::move(train), std::move(facts)};
}

// The registered model named by `yaml`'s model.name, built from its model.* keys (validated against the
// model's schema and the run's own keys, app/run_settings.h, defaults filled in) the way `bellows train` builds it.
inline models::BuiltModel build_model(const std::string& yaml, std::shared_ptr<const data::Dataset> train = nullptr) {
  config::Config c = config::Config::parse(yaml, "test.yaml");
  const models::ModelEntry& entry = models::find_model(c.node("model.name").as<std::string>());
  config::Schema s;
  app::add_run_setting_keys(s);  // model.name among them: app::build_model finds the model by it
  entry.add_keys(s);
  s.validate(c);
  return app::build_model(c, context_of(std::move(train)));  // with the model's weight imports, as a run does
}

// A tiny Transformer encoder for tests: d_model 8, 2 heads, feed-forward 16, max_len 16.
inline models::TransformerEncoderOptions tiny_encoder(std::int64_t layers = 2, double dropout = 0.0) {
  models::TransformerEncoderOptions o;
  o.d_model = 8;
  o.heads = 2;
  o.layers = layers;
  o.ff = 16;
  o.dropout = dropout;
  o.max_len = 16;
  return o;
}

// Trains `model` through its task for `steps` optimizer steps on fresh batches from make_batch(); returns the
// mean training loss over the last `tail` steps.
inline double train_tail_loss(models::BuiltModel& model, torch::optim::Optimizer& optimizer,
                              const std::function<data::Batch()>& make_batch, int steps, int tail) {
  double sum = 0;
  for (int step = 0; step < steps; ++step) {
    const StepOutput out = model.task->step(*model.module, make_batch());
    optimizer.zero_grad();
    out.loss.backward();
    optimizer.step();
    if (step >= steps - tail) sum += out.loss.item<double>();
  }
  return sum / tail;
}

}  // namespace bellows::test_support
