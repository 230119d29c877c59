// Regression and classification tasks; see tasks.h.
#include "bellows/models/tasks.h"

#include <ATen/ATen.h>

namespace bellows::models {
namespace {

class RegressionTask final : public Task {
 public:
  explicit RegressionTask(Forward forward) : forward_(std::move(forward)) {}
  StepOutput step(torch::nn::Module& model, const data::Batch& batch) override {
    const at::Tensor pred = forward_(model, batch.at("x"));
    const at::Tensor target = batch.at("y").to(pred.scalar_type()).view_as(pred);
    const at::Tensor diff = pred.to(at::kFloat) - target.to(at::kFloat);
    StepOutput out;
    out.loss = diff.square().mean();
    out.metrics.emplace_back("mae", diff.detach().abs().mean());
    return out;
  }

 private:
  Forward forward_;
};

class ClassificationTask final : public Task {
 public:
  explicit ClassificationTask(Forward forward) : forward_(std::move(forward)) {}
  StepOutput step(torch::nn::Module& model, const data::Batch& batch) override {
    const at::Tensor logits = forward_(model, batch.at("x")).to(at::kFloat);
    const at::Tensor target = batch.at("y").to(at::kLong).view({-1});
    StepOutput out;
    out.loss = at::cross_entropy_loss(logits, target);
    out.metrics.emplace_back("accuracy", logits.detach().argmax(1).eq(target).to(at::kFloat).mean());
    return out;
  }
  std::string monitor() const override { return "accuracy"; }
  bool lower_is_better() const override { return false; }

 private:
  Forward forward_;
};

}  // namespace

std::shared_ptr<Task> make_regression_task(Forward forward) { return std::make_shared<RegressionTask>(std::move(forward)); }
std::shared_ptr<Task> make_classification_task(Forward forward) {
  return std::make_shared<ClassificationTask>(std::move(forward));
}

}  // namespace bellows::models
