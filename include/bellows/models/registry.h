// The built-in models by name: each declares its config keys (under "model.") and builds a module together
// with the task that trains it. `bellows train` looks models up here; C++ users may build models directly.
#pragma once

#include <torch/nn/module.h>

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "bellows/config/schema.h"  // defines: Schema, Config
#include "bellows/data/dataset.h"   // defines: Dataset
#include "bellows/models/task.h"    // defines: Task

namespace bellows::models {

struct BuiltModel {
  std::shared_ptr<torch::nn::Module> module;
  std::shared_ptr<Task> task;
};

// What a model may learn from the data before it is built: input widths, class counts, coordinates (the
// graph network builds its mesh from the NetCDF file's latitudes and longitudes).
struct ModelContext {
  std::shared_ptr<const data::Dataset> train;  // null when the model is built without data
};

struct ModelEntry {
  std::string name;
  std::string help;
  std::function<void(config::Schema&)> add_keys;                                 // declares model.* keys
  std::function<BuiltModel(const config::Config&, const ModelContext&)> build;  // reads validated model.* keys
};

// Every registered model, sorted by name.
std::vector<ModelEntry> registry();

// Registration, one static object per model (in the model's .cpp): bellows' own models and a C++ user's.
//   static const bellows::models::ModelRegistrar kRegistered(my_entry());
void register_model(ModelEntry entry);  // kInternal error on a duplicate name
struct ModelRegistrar {
  explicit ModelRegistrar(ModelEntry entry) { register_model(std::move(entry)); }
};

// kConfig error naming the unknown model and suggesting the closest registered name.
const ModelEntry& find_model(const std::string& name);

}  // namespace bellows::models
