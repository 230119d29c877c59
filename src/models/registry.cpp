// The model registry; see registry.h. Each built-in model adds one entry here.
#include "bellows/models/registry.h"

#include <fmt/format.h>

#include "bellows/models/mlp.h"
#include "bellows/models/tasks.h"
#include "bellows/util/check.h"
#include "bellows/util/suggest.h"

namespace bellows::models {
namespace {

ModelEntry mlp_entry() {
  ModelEntry e;
  e.name = "mlp";
  e.help = "multi-layer perceptron over feature vectors (W1); task: regression or classification";
  e.add_keys = [](config::Schema& s) {
    using config::Type;
    s.add("model.in_features", Type::kInt, "input features").min(1).default_value(YAML::Node(64));
    s.add("model.hidden", Type::kIntList, "hidden layer widths").min(1).default_value(YAML::Load("[512, 512, 512]"));
    s.add("model.out_features", Type::kInt, "outputs (1 for regression, classes for classification)").min(1).default_value(YAML::Node(1));
    s.add("model.activation", Type::kString, "activation").choices({"gelu", "relu", "silu", "tanh"}).default_value(YAML::Node("gelu"));
    s.add("model.norm", Type::kString, "normalisation after each hidden layer").choices({"none", "layer", "batch"}).default_value(YAML::Node("none"));
    s.add("model.dropout", Type::kDouble, "dropout probability").min(0).max(0.99).default_value(YAML::Node(0.0));
    s.add("model.task", Type::kString, "training objective").choices({"regression", "classification"}).default_value(YAML::Node("regression"));
  };
  e.build = [](const config::Config& c) {
    MlpOptions o;
    o.in_features = config::get_int(c, "model.in_features");
    o.hidden = config::get_int_list(c, "model.hidden");
    o.out_features = config::get_int(c, "model.out_features");
    o.activation = config::get_string(c, "model.activation");
    o.norm = config::get_string(c, "model.norm");
    o.dropout = config::get_double(c, "model.dropout");
    auto module = std::make_shared<MlpImpl>(o);
    Forward forward = [](torch::nn::Module& m, const at::Tensor& x) { return static_cast<MlpImpl&>(m).forward(x); };
    auto task = config::get_string(c, "model.task") == "classification" ? make_classification_task(forward)
                                                                          : make_regression_task(forward);
    return BuiltModel{module, task};
  };
  return e;
}

}  // namespace

const std::vector<ModelEntry>& registry() {
  static const std::vector<ModelEntry> entries = {mlp_entry()};
  return entries;
}

const ModelEntry& find_model(const std::string& name) {
  std::vector<std::string> names;
  for (const auto& e : registry()) {
    if (e.name == name) return e;
    names.push_back(e.name);
  }
  const auto match = closest_match(name, names);
  std::string all;
  for (const auto& n : names) all += (all.empty() ? "" : ", ") + n;
  BELLOWS_FAIL(ErrorKind::kConfig,
               fmt::format("unknown model '{}'{}", name, match ? fmt::format("; did you mean '{}'?", *match) : std::string()),
               "registered models: " + all);
}

}  // namespace bellows::models
