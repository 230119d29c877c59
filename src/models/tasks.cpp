// Regression and classification tasks (see tasks.h), and the default Task::predict (task.h).
#include "bellows/models/tasks.h"

#include <ATen/ATen.h>
#include <fmt/format.h>
#include <torch/csrc/autograd/grad_mode.h>

#include "bellows/util/check.h"

namespace bellows {

at::Tensor Task::predict(torch::nn::Module&, const data::Batch&, const PredictOptions&) {
  BELLOWS_FAIL(ErrorKind::kUsage, "this model's task does not predict (its Task has no predict())",
               "predict with a model whose task implements Task::predict: the built-in regression and classification "
               "tasks and ddpm do; a C++ task overrides predict()");
}

}  // namespace bellows

namespace bellows::models {
namespace {

// Deterministic tasks have one answer per input.
void check_one_sample(const PredictOptions& options) {
  BELLOWS_CHECK_USAGE(options.samples == 1, fmt::format("{} samples asked of a deterministic model", options.samples),
                      "--samples applies to generative models (ddpm); leave it out");
}

class RegressionTask final : public Task {
 public:
  explicit RegressionTask(BatchForward forward) : forward_(std::move(forward)) {}
  StepOutput step(torch::nn::Module& model, const data::Batch& batch) override {
    const at::Tensor pred = forward_(model, batch);
    const at::Tensor target = batch.at("y").to(pred.scalar_type()).view_as(pred);
    const at::Tensor diff = pred.to(at::kFloat) - target.to(at::kFloat);
    StepOutput out;
    out.loss = diff.square().mean();
    out.metrics.emplace_back("mae", diff.detach().abs().mean());
    return out;
  }
  // The model's outputs.
  at::Tensor predict(torch::nn::Module& model, const data::Batch& batch, const PredictOptions& options) override {
    check_one_sample(options);
    torch::NoGradGuard no_grad;
    return forward_(model, batch).to(at::kFloat);
  }

 private:
  BatchForward forward_;
};

class ClassificationTask final : public Task {
 public:
  explicit ClassificationTask(BatchForward forward) : forward_(std::move(forward)) {}
  StepOutput step(torch::nn::Module& model, const data::Batch& batch) override {
    const at::Tensor logits = forward_(model, batch).to(at::kFloat);
    const at::Tensor target = batch.at("y").to(at::kLong).view({-1});
    StepOutput out;
    out.loss = at::cross_entropy_loss(logits, target);
    out.metrics.emplace_back("accuracy", logits.detach().argmax(1).eq(target).to(at::kFloat).mean());
    return out;
  }
  // Class probabilities [B, classes] (softmax of the logits).
  at::Tensor predict(torch::nn::Module& model, const data::Batch& batch, const PredictOptions& options) override {
    check_one_sample(options);
    torch::NoGradGuard no_grad;
    return forward_(model, batch).to(at::kFloat).softmax(-1);
  }
  std::string monitor() const override { return "accuracy"; }
  bool lower_is_better() const override { return false; }

 private:
  BatchForward forward_;
};

}  // namespace

namespace {
BatchForward on_x(Forward forward) {
  return [forward = std::move(forward)](torch::nn::Module& m, const data::Batch& b) { return forward(m, b.at("x")); };
}
}  // namespace

std::shared_ptr<Task> make_regression_task(Forward forward) { return make_regression_task(on_x(std::move(forward))); }
std::shared_ptr<Task> make_classification_task(Forward forward) { return make_classification_task(on_x(std::move(forward))); }
std::shared_ptr<Task> make_regression_task(BatchForward forward) { return std::make_shared<RegressionTask>(std::move(forward)); }
std::shared_ptr<Task> make_classification_task(BatchForward forward) {
  return std::make_shared<ClassificationTask>(std::move(forward));
}

}  // namespace bellows::models
