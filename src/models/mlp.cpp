// The MLP; see mlp.h.
#include "bellows/models/mlp.h"

#include "bellows/models/flops.h"

#include <fmt/format.h>
#include <torch/nn/modules/activation.h>
#include <torch/nn/modules/batchnorm.h>
#include <torch/nn/modules/dropout.h>
#include <torch/nn/modules/linear.h>
#include <torch/nn/modules/normalization.h>

#include "bellows/config/binding.h"  // defines: Binding
#include "bellows/models/registry.h"
#include "bellows/models/tasks.h"
#include "bellows/util/check.h"

namespace bellows::models {
namespace {

void add_activation(torch::nn::Sequential& seq, const std::string& name) {
  if (name == "gelu") {
    seq->push_back(torch::nn::GELU());
  } else if (name == "relu") {
    // In place: what precedes it (Linear, LayerNorm, BatchNorm1d) does not need its output for backward, and
    // ReLU's backward reads its own result, so one activation-sized tensor less per layer.
    seq->push_back(torch::nn::ReLU(torch::nn::ReLUOptions().inplace(true)));
  } else if (name == "silu") {
    seq->push_back(torch::nn::SiLU());
  } else if (name == "tanh") {
    seq->push_back(torch::nn::Tanh());
  } else {
    BELLOWS_FAIL(ErrorKind::kConfig, fmt::format("unknown activation '{}'", name), "use one of: gelu, relu, silu, tanh");
  }
}

}  // namespace

MlpImpl::MlpImpl(const MlpOptions& options) : options_(options) {
  BELLOWS_CHECK_CONFIG(options.in_features > 0 && options.out_features > 0,
                       fmt::format("MLP in_features={} out_features={}, expected positive", options.in_features, options.out_features),
                       "set model.in_features and model.out_features");
  BELLOWS_CHECK_CONFIG(options.norm == "none" || options.norm == "layer" || options.norm == "batch",
                       fmt::format("unknown norm '{}'", options.norm), "use one of: none, layer, batch");
  BELLOWS_CHECK_CONFIG(options.dropout >= 0 && options.dropout < 1, fmt::format("dropout {} outside [0, 1)", options.dropout),
                       "set model.dropout between 0 and 1");
  torch::nn::Sequential seq;
  std::int64_t width = options.in_features;
  for (const std::int64_t h : options.hidden) {
    BELLOWS_CHECK_CONFIG(h > 0, fmt::format("hidden width {} is not positive", h), "set model.hidden to positive widths");
    seq->push_back(torch::nn::Linear(width, h));
    if (options.norm == "layer") seq->push_back(torch::nn::LayerNorm(torch::nn::LayerNormOptions({h})));
    if (options.norm == "batch") seq->push_back(torch::nn::BatchNorm1d(h));
    add_activation(seq, options.activation);
    if (options.dropout > 0) seq->push_back(torch::nn::Dropout(options.dropout));
    width = h;
  }
  seq->push_back(torch::nn::Linear(width, options.out_features));
  layers_ = register_module("layers", seq);
}

at::Tensor MlpImpl::forward(const at::Tensor& x) { return layers_->forward(x); }

namespace {

// The model.* keys of MlpOptions, bound once (config/binding.h).
const config::Binding<MlpOptions>& mlp_binding() {
  using O = MlpOptions;
  return config::bound<O>("model.", [](config::Binding<O>& b) {
    b.key("in_features", &O::in_features, "input features").min(1);
    b.key("hidden", &O::hidden, "hidden layer widths").min(1);
    b.key("out_features", &O::out_features, "outputs (1 for regression, classes for classification)").min(1);
    b.key("activation", &O::activation, "activation").choices({"gelu", "relu", "silu", "tanh"});
    b.key("norm", &O::norm, "normalisation after each hidden layer").choices({"none", "layer", "batch"});
    b.key("dropout", &O::dropout, "dropout probability").min(0).max(0.99);
    b.key("task", &O::task, "training objective").choices({"regression", "classification"});
  });
}

ModelEntry mlp_entry() {
  ModelEntry e;
  e.name = "mlp";
  e.help = "multi-layer perceptron over feature vectors (W1); task: regression or classification";
  // The default demo (`bellows train` alone): README.md's numbers are this run's.
  e.demo.yaml = R"(data:
  source: synthetic
  kind: regression
  samples: 65536
  features: 64
  batch_size: 256
  val_fraction: 0.1
model:
  name: mlp
  in_features: 64
  hidden: [256, 256]
  out_features: 1
)";
  e.demo.data =
      "a synthetic regression table (64 features -> 1 target of a random teacher network plus noise, 65536 samples)";
  e.add_keys = [](config::Schema& s) { mlp_binding().declare(s); };
  e.io = [](const config::Config& c) {
    const MlpOptions o = mlp_binding().read(c);
    return ModelIo{o.in_features, o.out_features, std::nullopt, o.task};
  };
  e.forward_flops = [](const config::Config& c, const ModelContext&) -> std::optional<double> {
    const MlpOptions o = mlp_binding().read(c);
    std::vector<std::int64_t> widths{o.in_features};
    for (const auto h : o.hidden) widths.push_back(h);
    widths.push_back(o.out_features);
    const bool norm = o.norm != "none";
    double flops = 0;
    for (std::size_t i = 0; i + 1 < widths.size(); ++i) {
      flops += linear_flops(1, widths[i], widths[i + 1]);
      if (norm && i + 2 < widths.size()) flops += norm_flops(static_cast<double>(widths[i + 1]));  // after each hidden layer
    }
    return flops;
  };
  e.build = [](const config::Config& c, const ModelContext&) {
    const MlpOptions o = mlp_binding().read(c);
    auto module = std::make_shared<MlpImpl>(o);
    Forward forward = [](torch::nn::Module& m, const at::Tensor& x) { return static_cast<MlpImpl&>(m).forward(x); };
    auto task = o.task == "classification" ? make_classification_task(forward) : make_regression_task(forward);
    return BuiltModel{module, task};
  };
  return e;
}

const ModelRegistrar kMlpRegistered(mlp_entry());

}  // namespace

}  // namespace bellows::models
