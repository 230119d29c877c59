// What the trainer's tests share: a small MLP, its regression task, synthetic data as a TensorSource, SGD options,
// parameter copies and comparisons, and a sink that keeps every record and message.
#pragma once

#include <ATen/ATen.h>
#include <gtest/gtest.h>
#include <torch/utils.h>

#include <cmath>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "bellows/data/synthetic.h"
#include "bellows/data/tensor_source.h"
#include "bellows/models/mlp.h"
#include "bellows/models/tasks.h"
#include "bellows/obs/sink.h"
#include "bellows/train/trainer.h"

namespace bellows::train::test {

using models::MlpImpl;

inline std::shared_ptr<MlpImpl> make_mlp(std::uint64_t seed, double dropout = 0.0) {
  torch::manual_seed(seed);
  models::MlpOptions o;
  o.in_features = 8;
  o.hidden = {16, 16};
  o.out_features = 1;
  o.dropout = dropout;
  return std::make_shared<MlpImpl>(o);
}

inline std::shared_ptr<Task> regression() {
  return models::make_regression_task([](torch::nn::Module& m, const at::Tensor& x) { return static_cast<MlpImpl&>(m).forward(x); });
}

inline std::map<std::string, at::Tensor> dataset(std::int64_t n) {
  data::SyntheticOptions o;
  o.samples = n;
  o.features = 8;
  o.seed = 3;
  return data::make_synthetic(o);
}

inline data::TensorSource source(const std::map<std::string, at::Tensor>& t, std::int64_t batch) {
  data::TensorSourceOptions o;
  o.batch_size = batch;
  o.shuffle = false;
  return data::TensorSource(t, o);
}

inline TrainerOptions sgd_options() {
  TrainerOptions o;
  o.optimizer.type = "sgd";
  o.optimizer.lr = 0.1;
  o.optimizer.weight_decay = 0.0;
  o.schedule.type = "constant";
  o.log_every_n_steps = 1;
  o.count_flops = false;  // its message would join the ones these tests count (FLOPs: step_time_test.cpp)
  return o;
}

inline std::vector<at::Tensor> params_of(torch::nn::Module& m) {
  std::vector<at::Tensor> out;
  for (const auto& p : m.parameters()) out.push_back(p.detach().clone());
  return out;
}

inline double max_rel_diff(const std::vector<at::Tensor>& a, const std::vector<at::Tensor>& b) {
  double worst = 0;
  for (std::size_t i = 0; i < a.size(); ++i) {
    const double denom = std::max(a[i].abs().max().item<double>(), 1e-12);
    worst = std::max(worst, (a[i] - b[i]).abs().max().item<double>() / denom);
  }
  return worst;
}

// A sink that keeps every step record and message.
struct KeepingSink : obs::Sink {
  std::vector<obs::StepRecord> steps;
  std::vector<std::string> messages;
  void on_step(const obs::StepRecord& r) override { steps.push_back(r); }
  void on_message(const std::string& t) override { messages.push_back(t); }
  double value(std::size_t i, const std::string& key) const {
    for (const auto& [k, v] : steps.at(i).values) {
      if (k == key) return v;
    }
    return std::nan("");
  }
};

}  // namespace bellows::train::test
