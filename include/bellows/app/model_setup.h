// The model of a run: the data side's context handed to the registry's builder, and the one helper that
// imports weights by name (a model's own imports such as a pretrained encoder, and the run's init_weights).
#pragma once

#include <torch/nn/module.h>

#include <optional>
#include <string>
#include <vector>

#include "bellows/config/config.h"     // defines: Config
#include "bellows/data/build.h"        // defines: DataSplits
#include "bellows/models/registry.h"   // defines: BuiltModel, ModelContext, WeightImport
#include "bellows/models/task.h"       // defines: Task
#include "bellows/plan/plan.h"         // defines: PlanEntry
#include "bellows/util/error.h"        // defines: ErrorKind

namespace bellows::app {

// What the training data tells the model (sample shapes, classes, grid, vocabulary), and what it takes of the run's
// keys: the samples per loaded batch (data.batch_size, or train.global_batch_size under auto) and the dropout masks.
models::ModelContext model_context(const config::Config& config, const data::DataSplits& splits);
// The same without data: the facts the configured source reads from its header (a model rebuilt from a
// checkpoint's config, e.g. the graph network's grid).
models::ModelContext model_context_without_data(const config::Config& config);

// Loads the safetensors file `w.file` into the model (or its part under `w.prefix`) by tensor name; see
// models::WeightImport. strict: one kData error listing every difference; otherwise loads what matches and
// returns the differences (empty: everything matched).
std::vector<std::string> import_weights(torch::nn::Module& model, const models::WeightImport& w);

// The registered model named by model.name, built from its keys and `context`, with its imports loaded (an
// encoder's weights); a line per import ("loaded encoder weights from F; 2 tensors did not match: ...") goes to
// `notes` when given. load_imports = false: the bare model, for callers that load a checkpoint over it
// (`bellows predict`, which read encoder files it then overwrote).
models::BuiltModel build_model(const config::Config& config, const models::ModelContext& context,
                               std::vector<std::string>* notes = nullptr, bool load_imports = true);

// model.in_features from the data where the config leaves it at its schema default (the mlp's 64, the lstm's 16):
// the width of sample 0's inputs x (their last dimension, what check_data_against_model compares), set with the
// data as its origin, so that the run directory's config and its checkpoints name it. Returns the plan row that
// says so; nothing where the key was set, the model has none, or the data has no such inputs. A model built before
// its data (online training) keeps the default.
std::optional<plan::PlanEntry> take_input_width_from_data(config::Config& config, const data::Dataset& train);

// The data's samples against the model's keys before the model exists: model.in_features against the inputs'
// width, and the model's own check (ModelEntry::check_data). kConfig/kData errors naming key and shapes.
void check_data_against_model(const config::Config& config, const data::Dataset& train);

// Data the run will feed the model, for trial_evaluation: what to call it in an error ("the validation data
// (data.val_path: val.npz)") and the kind of error a misfit is (kConfig for the training data, which sizes the
// model; kData for the data that must fit a model made for it).
struct TrialData {
  const data::Dataset* dataset = nullptr;
  std::string what;
  ErrorKind kind = ErrorKind::kData;
};

// One evaluation step of the model and its task (eval mode, no gradients, on the device the model is on) on the
// first two samples of each dataset, before the run does any work: a validation file of another width, targets
// the task's loss cannot take (class labels under model.task: regression) fail here, as a `kind` error naming the
// data, the shapes fed and LibTorch's message (for a scripted model, the interpreter's error and source line),
// instead of at the first evaluation after the training steps. The model's buffers and the random streams are put
// back: the run is the same as without the trial.
void trial_evaluation(torch::nn::Module& model, Task& task, const std::vector<TrialData>& data);

// task.predict() on one batch of `what` (e.g. "--input val.npz"), rows [first, first + batch.size): LibTorch's errors
// (inputs of another shape than the model's) as a kData error naming the input, the rows, their shapes and
// LibTorch's message (a scripted model's source line); out-of-memory and bellows' own errors as they are.
at::Tensor predict_batch(Task& task, torch::nn::Module& model, const data::Batch& batch, const PredictOptions& options, const std::string& what);

// The input rows of a prediction against the model's input width (model.in_features or model.context_features of
// `config`), before any batch runs: a kData error "<what> has shape [r, w], the model expects [rows, W] (<key><key_note>)".
// `bellows predict` and app::OnlineTrainer::predict.
void check_prediction_input(const config::Config& config, const at::Tensor& x, const std::string& what, const std::string& key_note = "");

// The note for an import: "loaded <what> weights from <file>[; N tensors did not match: ...]".
std::string import_note(const models::WeightImport& w, const std::vector<std::string>& differences);

}  // namespace bellows::app
