// The built-in models by name: each declares its config keys (under "model.") and builds a module together
// with the task that trains it. `bellows train` looks models up here; C++ users may build models directly.
#pragma once

#include <torch/nn/module.h>

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "bellows/config/schema.h"  // defines: Schema, Config
#include "bellows/models/task.h"    // defines: Task

namespace bellows::models {

struct BuiltModel {
  std::shared_ptr<torch::nn::Module> module;
  std::shared_ptr<Task> task;
};

struct ModelEntry {
  std::string name;
  std::string help;
  std::function<void(config::Schema&)> add_keys;                 // declares model.* keys
  std::function<BuiltModel(const config::Config&)> build;       // reads validated model.* keys
};

const std::vector<ModelEntry>& registry();

// kConfig error naming the unknown model and suggesting the closest registered name.
const ModelEntry& find_model(const std::string& name);

}  // namespace bellows::models
