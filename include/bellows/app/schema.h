// The schema of a run config: every key a run reads (run, plan, train, optim, schedule, ema, scaler, data and its
// sources, checkpoint, profile, model and the chosen model's own keys) with the seeds' flag aliases, the
// embedded default demo, and the loading of a config from a file or the demo with overrides applied.
#pragma once

#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "bellows/config/schema.h"  // defines: Schema, Config

namespace bellows::app {

// The embedded demo, the config of a run without a config file: its common part (name, seed, train, optim,
// schedule; the origin of its keys is kDemoName) and the part of the model `model_name` (models::ModelDemo: data the
// synthetic source makes for it and the model's sizes), with a plan note saying so. The default demo is the MLP's on
// a synthetic regression table. kConfig error for a model without a demo.
inline constexpr const char* kDemoName = "<embedded demo>";
config::Config demo_config(const std::string& model_name, const config::ProfileResolver& profiles = {});

// All keys of a run config, with the keys of model `model_name` and the command-line aliases.
config::Schema run_schema(const std::string& model_name);

// Loads `file` (or, when absent, the demo of the model that `args` name with model.name), applies `args` ("key=value"
// and alias flags), validates. `args` may also hold `hardware_profile=NAME`/`--hardware-profile NAME`
// (app/profiles.h) and `--plan FILE|auto` (a tuned plan's settings between the files' keys and the command line's:
// app/tune.h).
config::Config resolve_config(const std::optional<std::filesystem::path>& file, const std::vector<std::string>& args);

// The same for a config given as YAML text (the C API's bellows_create_from_string); `name` stands for the
// file in messages ("<config text>:3:5: ...").
config::Config resolve_config_text(const std::string& yaml, const std::string& name, const std::vector<std::string>& args);
// The same for a config already loaded.
config::Config resolve_loaded_config(config::Config config, const std::vector<std::string>& args);

// Validates a config read from elsewhere (a checkpoint's manifest) against the schema of its model.
void validate_run_config(config::Config& config);

}  // namespace bellows::app
