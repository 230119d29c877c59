// The run's own keys: those no module below app/ owns (its name and outputs, the seed, the weights it starts from,
// resume, the memory it may use, the strategy's name, compile, the sinks' switches, online training's console, the
// model's name), each bound once to a field (config/binding.h) and read through RunSettings; and the run directory
// they name (make_run_dir). The keys of the modules' options are bound beside those options (trainer_setup.h,
// data_setup.h, run.h's plan keys, models/, data/sources/, dist/strategies/).
#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "bellows/config/config.h"  // defines: Config
#include "bellows/config/schema.h"  // defines: Schema

namespace bellows::app {

struct RunSettings {
  // identity
  std::string name = "run";         // name: outputs go to <output_dir>/<name>
  std::string output_dir = "runs";  // output_dir
  std::int64_t seed = 0;            // seed
  // step execution
  std::string dropout_masks = "parallel";  // dropout_masks: parallel | torch
  std::string compile = "auto";            // compile: auto | cuda_graph | off
  std::string strategy = "auto";           // dist.strategy: auto or a registered strategy
  // batch and limits
  std::int64_t global_batch_size = 0;  // train.global_batch_size (0: derived)
  double cpu_tensor_limit_mb = 0;      // cpu_tensor_limit_mb (0: none)
  double gpu_memory_limit_mb = 0;      // gpu_memory_limit_mb (0: none)
  // weights and memory
  bool checkpoint_strict = true;          // checkpoint.strict
  std::string init_weights;               // init_weights (a safetensors file; "" none)
  bool init_weights_strict = true;        // init_weights_strict
  std::vector<std::string> checkpointing;  // checkpointing: block name patterns, or auto
  std::vector<std::string> plan_allow;    // plan.allow
  double memory_budget_gib = 0;           // memory_budget_gib (0: the device's available memory)
  // logging
  std::map<std::string, bool> sinks;    // the registered sinks' switches by key (log.tensorboard: true, ...)
  bool log_flops = true;                // log.flops
  std::string online_console = "stdout";  // online.console: stdout | stderr | none
  std::string online_log = "sessions";    // online.log: sessions | epochs
  // resume
  std::string resume;  // resume: "", auto or a checkpoint path
  // model
  std::string model_name = "mlp";  // model.name

  // Whether a sink's switch is on (a sink without a key is always on).
  bool sink_on(const std::string& key) const;
};

// Declares the keys of RunSettings (each with its type, default, bounds, choices and help).
void add_run_setting_keys(config::Schema& schema);

// RunSettings of a validated config.
RunSettings run_settings(const config::Config& config);

// A fresh directory for the run: <output_dir>/<name>, or <name>-2, -3, ... when that one holds a run.
// resume: auto continues the newest run of the name (of <name> and <name>-N, the one whose newest valid checkpoint was
// written last; <name> when none has one); resume: PATH continues in <output_dir>/<name>. kResource error when it
// cannot be made.
std::filesystem::path make_run_dir(const RunSettings& run);

}  // namespace bellows::app
