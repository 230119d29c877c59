// The built-in models by name: each declares its config keys (under "model.") and builds a module together
// with the task that trains it. `bellows train` looks models up here; C++ users may build models directly.
#pragma once

#include <torch/nn/module.h>

#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "bellows/config/schema.h"   // defines: Schema, Config
#include "bellows/data/dataset.h"    // defines: Dataset, DataFacts
#include "bellows/models/dropout.h"  // defines: DropoutMasks
#include "bellows/models/task.h"     // defines: Task

namespace bellows::models {

// What a model may learn from the data before it is built, handed over by the data side (app/ fills it): the
// training dataset, for sample shapes (data::first_sample), and the facts its source knows: class names, the
// grid's coordinates and channel names (the graph network builds its mesh from them), the text vocabulary.
// Models never look behind the Dataset interface at concrete source types.
// Also what the run decides that a model's build or FLOP count needs (app/ fills these from the run's keys).
struct ModelContext {
  std::shared_ptr<const data::Dataset> train;  // null when the model is built without data
  data::DataFacts facts;                       // may be filled without data (a model rebuilt from a checkpoint)
  // Samples per loaded batch: data.batch_size, or train.global_batch_size when data.batch_size is auto; 0 unknown.
  std::int64_t loaded_batch = 0;
  // The run's dropout_masks (a scripted model's plan row says which masks its routed dropout draws).
  DropoutMasks dropout_masks = DropoutMasks::kParallel;
};

// A model's input and output keys, as app/ checks them against the data and prediction inputs (model_setup.h):
// each is set where the model has the key (model.in_features, model.out_features, model.context_features,
// model.task), read through the model's own binding.
struct ModelIo {
  std::optional<std::int64_t> in_features, out_features, context_features;
  std::optional<std::string> task;
};

// Weights a model asks to be loaded right after it is built (a pretrained encoder, seed 004), by tensor name.
// app/ imports them (one helper for these and init_weights); models do not read weight files themselves. File
// names may be relative to the part or carry its prefix (a whole exported model); with the prefix, tensors
// outside the part are ignored.
struct WeightImport {
  std::filesystem::path file;  // safetensors
  std::string prefix;          // the part of the model loaded: tensors whose names start with it ("encoder."); "" all
  bool strict = true;          // every tensor of that part must be in the file with its shape, and nothing else
  std::string what = "model";  // the part, in messages: "... in the encoder"
  std::string strict_key;      // the config key that relaxes `strict`, named in the error's hint
};

// A row a model adds to the run's plan table: a setting it chose and why (a TorchScript model's graph executor).
struct ModelPlanRow {
  std::string key, value, reason;
};

struct BuiltModel {
  std::shared_ptr<torch::nn::Module> module;
  std::shared_ptr<Task> task;
  std::vector<WeightImport> imports = {};  // loaded by app/ right after building
  std::vector<ModelPlanRow> plan_rows = {};
};

// What the embedded demo trains a model on when the command line names it and gives no config file
// (`bellows train model.name=transformer`, app/schema.h): data the synthetic source makes for it, small enough for
// seconds on two cores, and the model at its defaults but for the sizes that keep it that fast.
struct ModelDemo {
  // YAML over the demo's common part (name, seed, train, optim, schedule): its model: block replaces the MLP's and
  // its data: block, where it has one, the MLP demo's regression table. Widths and class counts it leaves out are
  // the data's (the models take them from the data). Empty: the model has no demo.
  std::string yaml;
  // The data in words, for the run's plan: "synthetic sequences: 16 steps x 8 features -> 1 regression target".
  std::string data;
};

struct ModelEntry {
  std::string name;
  std::string help;
  ModelDemo demo;  // every built-in model has one (tests/e2e/demo_cli_test.cpp trains each)
  std::function<void(config::Schema&)> add_keys;                                 // declares model.* keys
  std::function<BuiltModel(const config::Config&, const ModelContext&)> build;  // reads validated model.* keys
  // Optional: the data's samples against the model's keys, without building the model (kConfig/kData errors
  // naming the key and both shapes). Online training calls it on the first samples a program pushes.
  std::function<void(const config::Config&, const data::Dataset&)> check_data;
  // Optional: the model's forward FLOPs per sample, analytic per layer (models/flops.h), from its keys and, where
  // they depend on it, the data's sample shapes (context.train; std::nullopt without them).
  std::function<std::optional<double>(const config::Config&, const ModelContext&)> forward_flops;
  // What forward_flops assumes where the work varies between batches ("" where it does not), printed beside it.
  std::string forward_flops_basis;
  // 4-D activations (convolutions): channels_last and cuDNN's algorithm search apply; the autotuner and the
  // optimization matrix try them for such models only.
  bool convolutional = false;
  // Optional: whether the configured model has 2-D convolutions (4-D activations, as `convolutional`), where its keys
  // decide it rather than its name (a user's TorchScript file); `convolutional` otherwise. Read through
  // is_convolutional().
  std::function<bool(const config::Config&)> has_convolutions;
  // Optional: the model's input and output keys (ModelIo) in `config`; none without it.
  std::function<ModelIo(const config::Config&)> io;
  // Optional: the batch tensors besides x the model reads when predicting (`bellows predict` takes them from an .npz
  // input): a TorchScript model's model.predict_inputs when set, else its model.inputs. None without it.
  std::function<std::vector<std::string>(const config::Config&)> prediction_inputs;
};

// entry.has_convolutions(config) where the entry has it, else entry.convolutional.
bool is_convolutional(const ModelEntry& entry, const config::Config& config);

// Every registered model, sorted by name.
std::vector<ModelEntry> registry();

// Registration, one static object per model (in the model's .cpp): bellows' own models and a C++ user's.
//   static const bellows::models::ModelRegistrar kMyModelRegistered(my_entry());
// (Inside the library, file-local names must differ between files: the unity build compiles several together.)
void register_model(ModelEntry entry);  // kInternal error on a duplicate name
struct ModelRegistrar {
  explicit ModelRegistrar(ModelEntry entry) { register_model(std::move(entry)); }
};

// kConfig error naming the unknown model and suggesting the closest registered name.
const ModelEntry& find_model(const std::string& name);

}  // namespace bellows::models
