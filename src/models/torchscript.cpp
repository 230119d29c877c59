// model.name: torchscript -- a user's own PyTorch model saved as TorchScript (models/scripted.h), trained with
// bellows' task (regression, classification on a chosen output) or with the loss the module computes itself.
#include <ATen/ATen.h>
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <torch/csrc/autograd/grad_mode.h>
#include <torch/csrc/jit/python/update_graph_executor_opt.h>

#include "bellows/config/schema.h"
#include "bellows/data/dataset.h"
#include "bellows/models/registry.h"
#include "bellows/models/scripted.h"
#include "bellows/models/tasks.h"
#include "bellows/util/check.h"

namespace bellows::models {
namespace {

struct ScriptedOptions {
  std::string path;
  std::vector<ScriptedInput> inputs, predict_inputs;
  std::string output;
  bool module_loss = false;
  std::string loss_key;
  bool classification = false;
  std::string predict_method;
  bool jit_optimize = false;
};

ScriptedOptions read_options(const config::Config& c) {
  ScriptedOptions o;
  o.path = config::get_string(c, "model.path");
  o.inputs = parse_scripted_inputs(config::get_string_list(c, "model.inputs"), "model.inputs");
  const auto predict_inputs = config::get_string_list(c, "model.predict_inputs");
  o.predict_inputs = predict_inputs.empty() ? o.inputs : parse_scripted_inputs(predict_inputs, "model.predict_inputs");
  o.output = config::get_string(c, "model.output");
  o.module_loss = config::get_string(c, "model.loss") == "module";
  o.loss_key = config::get_string(c, "model.loss_key");
  o.classification = config::get_string(c, "model.task") == "classification";
  o.predict_method = config::get_string(c, "model.predict_method");
  o.jit_optimize = config::get_bool(c, "model.jit_optimize");
  return o;
}

std::string shapes_of(const data::Batch& batch, const std::vector<ScriptedInput>& inputs) {
  std::vector<std::string> parts;
  for (const auto& in : inputs) {
    const auto it = batch.tensors.find(in.tensor);
    if (it == batch.tensors.end()) continue;
    parts.push_back(fmt::format("{}: {} {}", in.tensor, c10::toString(it->second.scalar_type()), it->second.sizes()));
  }
  return fmt::format("{}", fmt::join(parts, ", "));
}

// The module's own loss: a scalar tensor, or the scalar under loss_key of a dict or tuple (Hugging Face models
// return `loss` when given labels); the dict's other scalar tensors become metrics.
StepOutput module_loss(const c10::IValue& out, const ScriptedOptions& o, const std::string& file) {
  StepOutput step;
  step.loss = out.isTensor() ? out.toTensor() : select_output(out, o.loss_key, "model.loss_key");
  BELLOWS_CHECK_CONFIG(step.loss.numel() == 1 && step.loss.dim() <= 1 && step.loss.is_floating_point(),
                       fmt::format("model.path {}: the module's loss ({}) is {} {}, expected a floating scalar", file,
                                   out.isTensor() ? "its output" : fmt::format("'{}'", o.loss_key), c10::toString(step.loss.scalar_type()),
                                   step.loss.sizes()),
                       "return the batch's mean loss (loss.mean()), or use model.loss: task with model.task");
  step.loss = step.loss.reshape({});
  if (out.isGenericDict()) {
    for (const auto& entry : out.toGenericDict()) {
      if (!entry.key().isString() || entry.key().toStringRef() == o.loss_key || !entry.value().isTensor()) continue;
      const at::Tensor& t = entry.value().toTensor();
      if (t.numel() == 1 && t.is_floating_point()) step.metrics.emplace_back(entry.key().toStringRef(), t.detach().reshape({}).to(at::kFloat));
    }
  }
  return step;
}

class ScriptedTask final : public Task {
 public:
  explicit ScriptedTask(ScriptedOptions options) : o_(std::move(options)) {
    BatchForward forward = [this](torch::nn::Module& m, const data::Batch& b) {
      return select_output(scripted(m).run("forward", o_.inputs, b), o_.output, "model.output");
    };
    if (!o_.module_loss) inner_ = o_.classification ? make_classification_task(forward) : make_regression_task(forward);
  }
  StepOutput step(torch::nn::Module& model, const data::Batch& batch) override {
    if (inner_) return inner_->step(model, batch);
    ScriptedModule& m = scripted(model);
    return module_loss(m.run("forward", o_.inputs, batch), o_, m.file().string());
  }
  std::string monitor() const override { return inner_ ? inner_->monitor() : "loss"; }
  bool lower_is_better() const override { return inner_ ? inner_->lower_is_better() : true; }
  // The forward output (model.output) or the method model.predict_method, on the predict inputs; keyword inputs
  // whose tensors a prediction lacks (labels) are left out. Classification: probabilities.
  at::Tensor predict(torch::nn::Module& model, const data::Batch& batch, const PredictOptions& options) override {
    BELLOWS_CHECK_USAGE(options.samples == 1, fmt::format("{} samples asked of a scripted model", options.samples),
                        "a scripted model predicts once per input; a generative one draws through model.predict_method (leave --samples out)");
    torch::NoGradGuard no_grad;
    ScriptedModule& m = scripted(model);
    const std::string method = o_.predict_method.empty() ? "forward" : o_.predict_method;
    if (method != "forward") at::manual_seed(options.seed + static_cast<std::uint64_t>(options.first_index));
    at::Tensor out = select_output(m.run(method, o_.predict_inputs, batch, /*skip_absent=*/true), o_.output, "model.output").to(at::kFloat);
    return !o_.module_loss && o_.classification ? out.softmax(-1) : out;
  }

 private:
  static ScriptedModule& scripted(torch::nn::Module& m) { return static_cast<ScriptedModule&>(m); }
  ScriptedOptions o_;
  std::shared_ptr<Task> inner_;
};

// One forward (eval mode, no gradients) on the data's first sample: arguments whose dtypes or shapes do not
// fit, or outputs that are not where the config says, fail here with the file, the signature and the shapes,
// instead of inside the first training step.
void trial_forward(ScriptedModule& m, const ScriptedOptions& o, const data::Batch& one) {
  torch::NoGradGuard no_grad;
  m.train(false);
  c10::IValue out;
  try {
    out = m.run("forward", o.inputs, one);
  } catch (const Error&) {
    m.train(true);
    throw;  // bellows' own (a missing batch tensor)
  } catch (const std::exception& e) {  // c10::Error, or the interpreter's torch::jit::JITException
    m.train(true);
    const auto* c10_error = dynamic_cast<const c10::Error*>(&e);
    std::string what = c10_error ? c10_error->what_without_backtrace() : e.what();
    // The interpreter's message ends with the Python line that failed; keep it, drop the C++ traceback.
    BELLOWS_FAIL(ErrorKind::kConfig,
                 fmt::format("model.path {}: {} failed on the data's first sample ({}):\n{}", m.file().string(), m.signature("forward"),
                             shapes_of(one, o.inputs), what.size() > 2000 ? what.substr(what.size() - 2000) : what),
                 "make model.inputs give forward() the batch tensors it expects, in its dtypes and shapes");
  }
  m.train(true);
  if (o.module_loss) {
    module_loss(out, o, m.file().string());
  } else {
    const at::Tensor t = select_output(out, o.output, "model.output");
    BELLOWS_CHECK_CONFIG(t.is_floating_point(),
                         fmt::format("model.path {}: model.output is {} {}, expected floating point outputs for model.task", m.file().string(),
                                     c10::toString(t.scalar_type()), t.sizes()),
                         "select the output that holds the predictions (model.output)");
  }
}

void add_keys(config::Schema& s) {
  using config::Type;
  auto node = [](auto v) { return YAML::Node(v); };
  s.add("model.path", Type::kString, "TorchScript file (torch.jit.script/trace(...).save); relative to the config file").required().file_path();
  s.add("model.inputs", Type::kStringList, "batch tensors given to forward(): 'x' by position, 'arg=x' by argument name")
      .default_value(YAML::Load("[x]"));
  s.add("model.output", Type::kString, "the output used: '' a tensor, an index of a tuple, or a dict key").default_value(node(""));
  s.add("model.loss", Type::kString, "task: model.task's loss on model.output against y; module: forward returns the loss")
      .choices({"task", "module"})
      .default_value(node("task"));
  s.add("model.loss_key", Type::kString, "model.loss module: the dict key or tuple index holding the loss").default_value(node("loss"));
  s.add("model.task", Type::kString, "model.loss task: training objective").choices({"regression", "classification"}).default_value(node("regression"));
  s.add("model.predict_method", Type::kString, "method that predicts ('' forward in eval mode; e.g. sample)").default_value(node(""));
  s.add("model.predict_inputs", Type::kStringList, "inputs of predictions, as model.inputs (empty: model.inputs)")
      .default_value(YAML::Load("[]"));
  s.add("model.jit_optimize", Type::kBool, "TorchScript graph executor optimisation (profiling, autodiff graphs, fusion)")
      .default_value(node(false));
}

ModelEntry torchscript_entry() {
  ModelEntry e;
  e.name = "torchscript";
  e.help = "your own PyTorch model, saved with torch.jit.script/trace; task: regression, classification, or the module's loss";
  e.add_keys = add_keys;
  e.check_data = [](const config::Config& c, const data::Dataset& train) {
    if (train.size() == 0) return;
    const ScriptedOptions o = read_options(c);
    const data::Batch one = data::first_sample(train);
    std::vector<std::string> have;
    for (const auto& [name, t] : one.tensors) have.push_back(name);
    for (const auto& in : o.inputs) {
      BELLOWS_CHECK_CONFIG(one.tensors.count(in.tensor) > 0,
                           fmt::format("model.inputs ({}) names batch tensor '{}', but the samples of {} have: {}",
                                       c.origin("model.inputs").str(), in.tensor, train.name(), fmt::join(have, ", ")),
                           "name tensors the data source gives (x, y, and extra arrays such as data.npy.extra)");
    }
    if (!o.module_loss) {
      BELLOWS_CHECK_CONFIG(one.tensors.count("y") > 0, fmt::format("model.task {} needs targets 'y', {} has none", c.origin("model.task").str(), train.name()),
                           "give the data targets, or use model.loss: module");
    }
  };
  e.build = [](const config::Config& c, const ModelContext& context) {
    const ScriptedOptions o = read_options(c);
    torch::jit::setGraphExecutorOptimize(o.jit_optimize);
    auto module = std::make_shared<ScriptedModule>(o.path);
    module->check_inputs("forward", o.inputs, "model.inputs");
    if (!o.predict_method.empty()) {
      BELLOWS_CHECK_CONFIG(module->has_method(o.predict_method),
                           fmt::format("model.predict_method is '{}', but {} has no such method", o.predict_method, o.path),
                           "export it with @torch.jit.export, or leave model.predict_method empty (forward predicts)");
    }
    module->check_inputs(o.predict_method.empty() ? "forward" : o.predict_method, o.predict_inputs, "model.predict_inputs");
    if (context.train && context.train->size() > 0) trial_forward(*module, o, data::first_sample(*context.train));
    return BuiltModel{module, std::make_shared<ScriptedTask>(o)};
  };
  return e;
}

const ModelRegistrar kTorchscriptRegistered(torchscript_entry());

}  // namespace
}  // namespace bellows::models
