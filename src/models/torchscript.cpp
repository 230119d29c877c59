// model.name: torchscript -- a user's own PyTorch model saved as TorchScript (models/scripted.h), trained with
// bellows' task (regression, classification on a chosen output) or with the loss the module computes itself.
#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <ATen/autocast_mode.h>
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <torch/csrc/autograd/grad_mode.h>
#include <torch/csrc/jit/python/update_graph_executor_opt.h>
#include <torch/csrc/jit/serialization/import.h>

#include <algorithm>
#include <array>

#include "bellows/config/binding.h"  // defines: Binding, bound
#include "bellows/config/paths.h"    // defines: check_path_exists
#include "bellows/config/schema.h"
#include "bellows/data/dataset.h"
#include "bellows/models/registry.h"
#include "bellows/models/scripted.h"
#include "bellows/models/tasks.h"
#include "bellows/util/check.h"
#include "bellows/util/exception_report.h"  // defines: describe_libtorch_error
#include "bellows/util/format.h"  // defines: shape_of

namespace bellows::models {
namespace {

// The model.* keys as written, bound once (config/binding.h); read_options parses them.
struct ScriptedKeys {
  std::string path;  // required: no default
  std::vector<std::string> inputs = {"x"};
  std::string output;
  std::string loss = "task";  // task | module
  std::string loss_key = "loss";
  std::string task = "regression";  // regression | classification
  std::string predict_method;
  std::vector<std::string> predict_inputs;  // empty: inputs
  bool jit_optimize = false;
};

const config::Binding<ScriptedKeys>& scripted_keys_binding() {
  using O = ScriptedKeys;
  return config::bound<O>("model.", [](config::Binding<O>& b) {
    b.custom("path", config::Type::kString, "TorchScript file (torch.jit.script/trace(...).save); relative to the config file",
             [](const config::Config& c, const std::string& key, O& o) { o.path = config::get_string(c, key); })
        .required()
        .file_path();
    b.key("inputs", &O::inputs, "batch tensors given to forward(): 'x' by position, 'arg=x' by argument name");
    b.key("output", &O::output, "the output used: '' a tensor, an index of a tuple, or a dict key");
    b.key("loss", &O::loss, "task: model.task's loss on model.output against y; module: forward returns the loss")
        .choices({"task", "module"});
    b.key("loss_key", &O::loss_key, "model.loss module: the dict key or tuple index holding the loss");
    b.key("task", &O::task, "model.loss task: training objective").choices({"regression", "classification"});
    b.key("predict_method", &O::predict_method, "method that predicts ('' forward in eval mode; e.g. sample)");
    b.key("predict_inputs", &O::predict_inputs, "inputs of predictions, as model.inputs (empty: model.inputs)");
    b.key("jit_optimize", &O::jit_optimize, "TorchScript graph executor optimisation (profiling, autodiff graphs, fusion)");
  });
}

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
  const ScriptedKeys k = scripted_keys_binding().read(c);
  ScriptedOptions o;
  o.path = k.path;
  config::check_path_exists(c, "model.path", o.path, ErrorKind::kConfig, "set model.path to a TorchScript file");
  o.inputs = parse_scripted_inputs(k.inputs, "model.inputs");
  o.predict_inputs = k.predict_inputs.empty() ? o.inputs : parse_scripted_inputs(k.predict_inputs, "model.predict_inputs");
  o.output = k.output;
  o.module_loss = k.loss == "module";
  o.loss_key = k.loss_key;
  o.classification = k.task == "classification";
  o.predict_method = k.predict_method;
  o.jit_optimize = k.jit_optimize;
  return o;
}

// ModelEntry::prediction_inputs: the batch tensors besides x of model.predict_inputs, else of model.inputs.
std::vector<std::string> prediction_tensors(const config::Config& c) {
  const ScriptedKeys k = scripted_keys_binding().read(c);
  const bool own = !k.predict_inputs.empty();  // predict_inputs, when set, replaces inputs
  std::vector<std::string> names;
  if (!own && k.inputs.empty()) return names;
  const auto inputs = parse_scripted_inputs(own ? k.predict_inputs : k.inputs, own ? "model.predict_inputs" : "model.inputs");
  for (const ScriptedInput& in : inputs) {
    if (in.tensor != "x" && std::find(names.begin(), names.end(), in.tensor) == names.end()) names.push_back(in.tensor);
  }
  return names;
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
    // TorchScript's optimised graphs do not run under the caller's autocast: with model.jit_optimize a bf16-mixed
    // run would compute in float32 without a word (tests/unit/models/scripted_test.cpp saw an mm stay float32).
    if (o_.jit_optimize && !batch.tensors.empty()) {
      const c10::DeviceType device = batch.tensors.begin()->second.device().type();
      BELLOWS_CHECK_CONFIG(!at::autocast::is_autocast_enabled(device),
                           "model.jit_optimize is true under a mixed precision: TorchScript's optimised graphs run outside "
                           "autocast, so the model would compute in float32",
                           "set model.jit_optimize: false (the default), or precision: fp32");
    }
    if (inner_) return inner_->step(model, batch);
    ScriptedModule& m = scripted(model);
    return module_loss(m.run("forward", o_.inputs, batch), o_, m.file().string());
  }
  std::string monitor() const override { return inner_ ? inner_->monitor() : "loss"; }
  bool lower_is_better() const override { return inner_ ? inner_->lower_is_better() : true; }
  // The forward output (model.output) or the method model.predict_method, on the predict inputs; keyword inputs
  // whose tensors a prediction lacks (labels) are left out. Classification: probabilities. A predict_method may
  // draw (a sampler): the default generator is seeded from the seed and the batch's first row for each of the
  // `samples` draws, stacked as [rows, samples, ...] when there are several (what ddpm's predict gives). The draws
  // then depend on how the rows are batched, which the built-in ddpm's per-row streams do not.
  at::Tensor predict(torch::nn::Module& model, const data::Batch& batch, const PredictOptions& options) override {
    const std::string method = o_.predict_method.empty() ? "forward" : o_.predict_method;
    BELLOWS_CHECK_USAGE(options.samples == 1 || method != "forward",
                        fmt::format("{} samples asked of a scripted model that predicts with forward", options.samples),
                        "several draws per input come from a sampling method (model.predict_method); leave the samples out");
    torch::NoGradGuard no_grad;
    ScriptedModule& m = scripted(model);
    // The draws' seeding must not move the training's random streams (online training predicts between sessions).
    std::vector<std::pair<at::Generator, at::Tensor>> saved;
    if (method != "forward") {
      std::vector<at::Generator> generators{at::detail::getDefaultCPUGenerator()};
      const at::Tensor& first = batch.at("x");  // every prediction batch has x; the other tensors are on its device
      if (!first.is_cpu()) generators.push_back(at::globalContext().defaultGenerator(first.device()));
      for (auto& g : generators) saved.emplace_back(g, g.get_state());
    }
    struct Restore {
      std::vector<std::pair<at::Generator, at::Tensor>>& saved;
      ~Restore() {
        for (auto& [g, state] : saved) g.set_state(state);
      }
    } restore{saved};
    std::vector<at::Tensor> draws;
    for (std::int64_t s = 0; s < options.samples; ++s) {
      if (method != "forward") {
        at::manual_seed(options.seed * 0x9E3779B97F4A7C15ULL + static_cast<std::uint64_t>(options.first_index) * 1000003ULL +
                        static_cast<std::uint64_t>(s));
      }
      at::Tensor out = select_output(m.run(method, o_.predict_inputs, batch, /*skip_absent=*/true), o_.output, "model.output").to(at::kFloat);
      draws.push_back(!o_.module_loss && o_.classification ? out.softmax(-1) : out);
    }
    return options.samples == 1 ? draws.front() : at::stack(draws, 1);
  }
 private:
  static ScriptedModule& scripted(torch::nn::Module& m) { return static_cast<ScriptedModule&>(m); }
  ScriptedOptions o_;
  std::shared_ptr<Task> inner_;
};

// One forward (eval mode, no gradients) on the data's first sample: arguments whose dtypes or shapes do not
// fit, or outputs that are not where the config says, fail here with the file, the signature and the shapes,
// instead of inside the first training step.
// Returns the output model.task takes (undefined under model.loss: module).
at::Tensor trial_forward(ScriptedModule& m, const ScriptedOptions& o, const data::Batch& one) {
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
    // The interpreter's error line and the model's source line that raised it, as every LibTorch error is reported.
    BELLOWS_FAIL(ErrorKind::kConfig,
                 fmt::format("model.path {}: {} failed on the data's first sample ({}): {}", m.file().string(), m.signature("forward"),
                             shapes_of(one, o.inputs), describe_libtorch_error(e)),
                 "make model.inputs give forward() the batch tensors it expects, in its dtypes and shapes");
  }
  m.train(true);
  if (o.module_loss) {
    module_loss(out, o, m.file().string());
    return {};
  }
  const at::Tensor t = select_output(out, o.output, "model.output");
  BELLOWS_CHECK_CONFIG(t.is_floating_point(),
                       fmt::format("model.path {}: model.output is {} {}, expected floating point outputs for model.task", m.file().string(),
                                   c10::toString(t.scalar_type()), t.sizes()),
                       "select the output that holds the predictions (model.output)");
  return t;
}

// model.task against the model's output and the targets: integer targets of one value per sample beside an output
// of several are class labels, which regression (the default) would compare value by value.
void check_task(const config::Config& c, const ScriptedOptions& o, const at::Tensor& output, const at::Tensor& y) {
  if (o.module_loss || o.classification || !output.defined() || !y.defined()) return;
  const std::int64_t outputs = output.numel() / std::max<std::int64_t>(1, output.size(0));
  const std::int64_t targets = y.numel() / std::max<std::int64_t>(1, y.size(0));
  BELLOWS_CHECK_CONFIG(at::isFloatingType(y.scalar_type()) || outputs == targets,
                       fmt::format("model.task is regression ({}) but the targets y are {} class labels ({} per sample) and the model "
                                   "gives {} outputs per sample ({} {}): regression compares outputs with targets value by value",
                                   c.origin("model.task").str(), c10::toString(y.scalar_type()), targets, outputs, o.path,
                                   shape_of(output)),
                       "set model.task: classification (cross-entropy over the outputs as class scores), or give float targets of the "
                       "outputs' width for regression");
}

// The plan table's row for model.jit_optimize: off runs the module's ops one at a time through the interpreter,
// as eager PyTorch runs them (the golden tests' bitwise agreement); on adds the profiling executor's passes.
// Chosen by measurement (bench/peers/run.py --scripted, docs/benchmarks.md).
constexpr std::array<const char*, 2> kJitOptimizeReason = {
    "default: the interpreter runs the ops one by one as eager PyTorch does; the graph executor's optimisation "
    "measured within the trials' spread on the CPU (W1 1.05x, W3 1.03x and 0.94x; docs/benchmarks.md)",
    "requested: the profiling graph executor (autodiff subgraphs, fusion where LibTorch has a fuser)"};

ModelEntry torchscript_entry() {
  ModelEntry e;
  e.name = "torchscript";
  e.help = "your own PyTorch model, saved with torch.jit.script/trace; task: regression, classification, or the module's loss";
  // No data: block, so the MLP demo's table: the demo cannot know a scripted model's inputs. model.path is the
  // command line's.
  e.demo.yaml = "model:\n  name: torchscript\n";
  e.demo.data =
      "the MLP demo's synthetic regression table (x of 64 features -> y of 1 target; the demo cannot know a "
      "scripted model's inputs: a model taking x [B, 64] trains as it is, a config file gives another its data)";
  e.add_keys = [](config::Schema& s) { scripted_keys_binding().declare(s); };
  e.io = [](const config::Config& c) {
    return ModelIo{std::nullopt, std::nullopt, std::nullopt, scripted_keys_binding().read(c).task};
  };
  e.prediction_inputs = prediction_tensors;
  // 2-D convolutions: a 4-D parameter (Conv2d weights); channels_last (a layout of 4-D tensors) and cuDNN's search
  // are then worth trying. A Conv1d's 3-D weights have no channels_last layout.
  e.has_convolutions = [](const config::Config& c) {
    try {
      const torch::jit::Module m = torch::jit::load(scripted_keys_binding().read(c).path, c10::Device(c10::kCPU));
      for (const auto& p : m.named_parameters()) {
        if (p.value.dim() == 4) return true;
      }
    } catch (const std::exception&) {  // the run itself says what is wrong with the file
    }
    return false;
  };
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
    // One forward on the first sample, with a module of its own: here, before the model exists (`bellows train`),
    // and on an online trainer's first pushed samples (the C API's and Fortran's bad pushes fail here, as the
    // built-in models' width checks make them). The file is read a second time for it.
    ScriptedModule m(o.path);
    m.check_inputs("forward", o.inputs, "model.inputs");
    const auto y = one.tensors.find("y");
    check_task(c, o, trial_forward(m, o, one), y == one.tensors.end() ? at::Tensor() : y->second);
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
    BuiltModel built{module, std::make_shared<ScriptedTask>(o)};
    built.plan_rows.push_back({"jit_optimize", o.jit_optimize ? "true" : "false", kJitOptimizeReason[o.jit_optimize ? 1 : 0]});
    if (const RoutedCalls routed = module->routed_calls(); routed.dropout + routed.attention > 0) {
      const bool torch_masks = context.dropout_masks == DropoutMasks::kTorch;
      built.plan_rows.push_back(
          {"dropout", torch_masks ? "ATen's draws" : "parallel masks",
           fmt::format("the scripted graphs' {} dropout and {} scaled_dot_product_attention call site(s) draw their masks with "
                       "bellows' dropout: {}",
                       routed.dropout, routed.attention,
                       torch_masks ? "ATen's operators, PyTorch's draws bit for bit (dropout_masks: torch)"
                                   : "filled in parallel on the CPU, PyTorch's statistics but not its draws "
                                     "(dropout_masks: torch for those; docs/models.md)")});
    }
    return built;
  };
  return e;
}

const ModelRegistrar kTorchscriptRegistered(torchscript_entry());

}  // namespace
}  // namespace bellows::models
