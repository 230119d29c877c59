// The model of a run; see model_setup.h.
#include "bellows/app/model_setup.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <numeric>
#include <utility>

#include "bellows/app/data_setup.h"
#include "bellows/app/trainer_setup.h"
#include "bellows/app/run_settings.h"  // defines: run_settings
#include "bellows/ckpt/safetensors.h"
#include "bellows/train/checkpointing.h"
#include "bellows/train/step_undo.h"
#include "bellows/util/check.h"
#include "bellows/util/exception_report.h"
#include "bellows/util/format.h"

namespace bellows::app {

namespace {

// What a model takes of the run's keys besides its own: the samples per loaded batch and the dropout masks.
models::ModelContext run_context(const config::Config& c, std::shared_ptr<const data::Dataset> train, data::DataFacts facts) {
  models::ModelContext context{std::move(train), std::move(facts)};
  const LoaderSettings loader = loader_settings(c);
  context.loaded_batch = loader.batch_auto ? run_settings(c).global_batch_size : loader.batch_size;
  context.dropout_masks = dropout_masks_setting(c);
  return context;
}

}  // namespace

models::ModelContext model_context(const config::Config& config, const data::DataSplits& splits) {
  return run_context(config, splits.train, splits.facts);
}

models::ModelContext model_context_without_data(const config::Config& config) {
  return run_context(config, nullptr, data::facts_without_data(config));
}

std::vector<std::string> import_weights(torch::nn::Module& model, const models::WeightImport& w) {
  const std::map<std::string, at::Tensor> stored = ckpt::read_safetensors(w.file);
  // Names relative to the part, or carrying its prefix (then whatever lies outside the part is ignored).
  bool prefixed = false;
  for (const auto& [name, t] : stored) prefixed = prefixed || (!w.prefix.empty() && name.starts_with(w.prefix));
  std::map<std::string, at::Tensor> tensors;
  for (const auto& [name, t] : stored) {
    if (!prefixed) tensors.emplace(name, t);
    else if (name.starts_with(w.prefix)) tensors.emplace(name.substr(w.prefix.size()), t);
  }
  train::TensorLoadOptions o;
  o.strict = w.strict;
  o.prefix = w.prefix;
  o.source = "the file";
  o.target = "the " + w.what;
  o.subject = fmt::format("weights file {}", w.file.string());
  o.hint = fmt::format("export them from a run with the same model sizes (bellows ckpt export){}",
                       w.strict_key.empty() ? std::string() : fmt::format(", or set {}: false to load what matches", w.strict_key));
  return train::load_model_tensors(model, tensors, o);
}

std::string import_note(const models::WeightImport& w, const std::vector<std::string>& differences) {
  return fmt::format("loaded {}weights from {}{}", w.what == "model" ? "" : w.what + " ", w.file.string(),
                     differences.empty() ? std::string()
                                         : fmt::format("; {} tensors did not match: {}", differences.size(), fmt::join(differences, "; ")));
}

namespace {

// The configured model's entry, and its input and output keys (none where the entry has no io).
const models::ModelEntry& configured_model(const config::Config& c) { return models::find_model(run_settings(c).model_name); }
models::ModelIo model_io(const models::ModelEntry& entry, const config::Config& c) { return entry.io ? entry.io(c) : models::ModelIo{}; }

// The targets against model.out_features, for the models with a model.task (mlp, lstm/gru, transformer): a
// shape mismatch or a label out of range would otherwise surface as LibTorch's error inside the first step.
// (0: the model takes the count from the data and checks it itself, models/class_count.h.)
void check_targets_against_model(const config::Config& c, const models::ModelIo& io, const data::Dataset& train) {
  if (!io.out_features || !io.task || *io.out_features <= 0 || train.size() == 0) return;
  const data::Batch one = data::first_sample(train);
  const std::int64_t out = *io.out_features;
  const auto y = one.tensors.find("y");
  if (y == one.tensors.end() || !y->second.defined()) return;
  if (*io.task == "regression") {
    const std::int64_t per_sample = y->second.numel() / std::max<std::int64_t>(1, y->second.size(0));
    BELLOWS_CHECK_CONFIG(per_sample == out,
                         fmt::format("model.out_features is {} ({}) but the targets of {} have {} value(s) per sample (y {})", out,
                                     c.origin("model.out_features").str(), train.name(), per_sample, shape_of(y->second.select(0, 0))),
                         at::isFloatingType(y->second.scalar_type())
                             ? fmt::format("set model.out_features: {} (or choose the target columns)", per_sample)
                             : fmt::format("the targets are integers: for class labels set model.task: classification (model.task is "
                                           "regression, {}); for regression set model.out_features: {}",
                                           c.origin("model.task").str(), per_sample));
    return;
  }
  const at::Tensor labels = train.class_labels().defined() ? train.class_labels() : y->second.reshape(-1);
  if (labels.numel() == 0 || at::isFloatingType(labels.scalar_type())) return;
  const std::int64_t low = labels.min().item<std::int64_t>(), high = labels.max().item<std::int64_t>();
  BELLOWS_CHECK_DATA(low >= 0, fmt::format("{} has a negative class label ({})", train.name(), low),
                     "class labels are 0, 1, ..., classes - 1");
  BELLOWS_CHECK_CONFIG(high < out,
                       fmt::format("model.out_features is {} ({}) but {} has class labels up to {}", out,
                                   c.origin("model.out_features").str(), train.name(), high),
                       fmt::format("set model.out_features to the number of classes, at least {}", high + 1));
}

}  // namespace

std::optional<plan::PlanEntry> take_input_width_from_data(config::Config& c, const data::Dataset& train) {
  const bool has_key = model_io(configured_model(c), c).in_features.has_value();
  if (!has_key || !c.is_schema_default("model.in_features") || train.size() == 0) return std::nullopt;
  const data::Batch one = data::first_sample(train);
  const auto x = one.tensors.find("x");
  if (x == one.tensors.end() || !x->second.defined() || x->second.dim() < 2 || x->second.size(-1) < 1) return std::nullopt;  // checked next
  const std::int64_t width = x->second.size(-1);
  c.set("model.in_features", YAML::Node(width),
        config::Origin::noted(fmt::format("the data: {}'s inputs x have {} features", train.name(), width)));
  return plan::PlanEntry{"model.in_features", std::to_string(width),
                         fmt::format("not set: the width of the data's inputs (x {} in {})", shape_of(x->second.select(0, 0)), train.name())};
}

void check_data_against_model(const config::Config& c, const data::Dataset& train) {
  const models::ModelEntry& entry = configured_model(c);
  const models::ModelIo io = model_io(entry, c);
  if (io.in_features && train.size() > 0) {
    const data::Batch one = data::first_sample(train);
    BELLOWS_CHECK_CONFIG(one.tensors.count("x") > 0, fmt::format("the model reads inputs 'x', {} has none", train.name()),
                         "name the input array x");
    const std::int64_t width = one.at("x").size(-1);
    BELLOWS_CHECK_CONFIG(*io.in_features == width,
                         fmt::format("model.in_features is {} ({}) but the data's samples have {} features ({})", *io.in_features,
                                     c.origin("model.in_features").str(), width, train.name()),
                         "make the model's input width match the data");
  }
  check_targets_against_model(c, io, train);
  if (entry.check_data) entry.check_data(c, train);
}

void trial_evaluation(torch::nn::Module& model, Task& task, const std::vector<TrialData>& data) {
  const at::Device device = [&] {
    for (const auto& p : model.parameters()) return p.device();
    return at::Device(at::kCPU);
  }();
  for (const TrialData& d : data) {
    if (d.dataset == nullptr || d.dataset->size() == 0) continue;
    std::vector<std::int64_t> first(static_cast<std::size_t>(std::min<std::int64_t>(2, d.dataset->size())));
    std::iota(first.begin(), first.end(), std::int64_t{0});
    data::FetchContext fetch;
    fetch.train = false;
    data::Batch batch = d.dataset->get_batch(first, fetch).to(device, /*non_blocking=*/false);
    d.dataset->finish_on_device(batch);
    train::StepUndo undo(model);  // the buffers and random streams as they were (a sampling task draws noise)
    undo.save();
    const bool was_training = model.is_training();
    std::string failed;
    try {
      torch::NoGradGuard no_grad;
      model.eval();
      task.eval_step(model, batch);
    } catch (const Error&) {
      model.train(was_training);
      undo.restore();
      throw;  // bellows' own check, with its own words
    } catch (const std::exception& e) {
      if (report_current_exception().out_of_memory) throw;
      failed = fmt::format("{} does not fit the model: an evaluation step on its first {} sample(s) ({}) failed: {}", d.what,
                           first.size(), batch.shapes(), describe_libtorch_error(e));
    }
    model.train(was_training);
    undo.restore();
    if (!failed.empty()) {
      BELLOWS_FAIL(d.kind, failed,
                   d.kind == ErrorKind::kConfig
                       ? "make the model's inputs and outputs fit the data's tensors (model.inputs, model.output, model.task)"
                       : "give it tensors of the training data's shapes and dtypes (the same features, channels and targets)");
    }
  }
}

at::Tensor predict_batch(Task& task, torch::nn::Module& model, const data::Batch& batch, const PredictOptions& options, const std::string& what) {
  std::string failed;
  try {
    return task.predict(model, batch, options);
  } catch (const Error&) {
    throw;
  } catch (const std::exception& e) {
    if (report_current_exception().out_of_memory) throw;
    failed = fmt::format("{} does not fit the model: the prediction of rows {}..{} ({}) failed: {}", what, options.first_index,
                         options.first_index + batch.size - 1, batch.shapes(), describe_libtorch_error(e));
  }
  BELLOWS_FAIL(ErrorKind::kData, failed, "give the inputs the model was trained on: the training data's shapes and dtypes, one row per sample");
}

void check_prediction_input(const config::Config& c, const at::Tensor& x, const std::string& what, const std::string& key_note) {
  const models::ModelIo io = model_io(configured_model(c), c);
  const std::pair<const char*, std::optional<std::int64_t>> widths[] = {{"model.in_features", io.in_features},
                                                                         {"model.context_features", io.context_features}};
  for (const auto& [key, configured] : widths) {
    if (!configured) continue;
    const std::int64_t width = *configured;
    BELLOWS_CHECK_DATA(x.dim() == 2 && x.size(1) == width,
                       fmt::format("{} has shape {}, the model expects [rows, {}] ({}{})", what, shape_of(x), width, key, key_note),
                       "give the inputs the model was trained on, one row per sample");
  }
}

models::BuiltModel build_model(const config::Config& config, const models::ModelContext& context, std::vector<std::string>* notes,
                               bool load_imports) {
  models::BuiltModel built = configured_model(config).build(config, context);
  if (!load_imports) return built;
  for (const auto& w : built.imports) {
    const auto differences = import_weights(*built.module, w);
    if (notes) notes->push_back(import_note(w, differences));
  }
  return built;
}

}  // namespace bellows::app
