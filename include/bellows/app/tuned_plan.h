// Tuned plans as a config's input: `bellows train CONFIG --plan plan.json` (and every command that resolves a run
// config) applies the settings a tuner found (`bellows plan`, lab/tune.h) between the config files' keys and the
// command line's; `--plan auto` reuses the plan cached for this config and machine, tuning first when there is none.
// The file's format and where the cache keeps it live here, with the composition root; the tuner that writes them
// lives in lab/ and reaches `--plan auto` through set_plan_tuner.
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "bellows/config/config.h"     // defines: Config
#include "bellows/hw/hardware_info.h"  // defines: HardwareInfo

namespace bellows::app {

inline constexpr const char* kTunedPlanFormat = "bellows-tuned-plan";

// A tuned plan: what `bellows plan` writes (with its trials: lab::TuneReport) and `bellows train --plan` reads.
struct TunedPlan {
  std::string config_name;
  std::string config_key;   // hex hash of the resolved config, without the keys that do not change a step's speed
  std::string machine;      // one line
  std::string machine_key;  // hex hash of the CPU, cores, GPUs, LibTorch
  std::string mode;         // tune | grid
  double budget_s = 0, seconds = 0, trial_seconds = 0;
  std::vector<std::string> allow;             // plan.allow
  std::vector<std::string> overrides;         // the winner's settings that differ from the configured ones
  std::vector<std::string> changes_numerics;  // of those, the keys that change the numerics (allowed by plan.allow)
  double baseline_samples_per_s = 0, samples_per_s = 0;  // measured, configured and winner
  std::string winner;                          // the winning trial's name
  std::vector<std::string> notes;              // the space's notes and the tuner's (budget, pruning)
  std::size_t trial_count = 0;                 // trials measured

  nlohmann::json to_json() const;  // without the trials (lab::TuneReport adds them)
  static TunedPlan from_json(const nlohmann::json& j, const std::string& origin);  // kConfig error naming origin
};

// The hash of a config that names its tuned plan in the cache: the resolved tree without name, output_dir, resume,
// seed, train.epochs, train.max_steps, checkpoint.*, log.*, and the keys a tuned plan sets.
std::string tune_config_key(const config::Config& config);
std::string tune_machine_key(const hw::HardwareInfo& hw);
std::string machine_line(const hw::HardwareInfo& hw);

// Reads a tuned plan (kConfig error naming the file: missing, not JSON, not a tuned plan, a bad override).
TunedPlan read_tuned_plan(const std::filesystem::path& path);

// Where `--plan auto` keeps the plan for a config and machine: <user cache>/plans/<config key>-<machine key>.json.
std::filesystem::path cached_plan_path(const std::string& config_key, const std::string& machine_key);

// Takes `--plan VALUE`, `--plan=VALUE` and `plan=VALUE` out of `args`; returns the value (the last one given).
std::optional<std::string> take_plan_argument(std::vector<std::string>& args);

// Whether the user set `key` on the command line (a tuner leaves such keys alone).
bool on_command_line(const config::Config& config, const std::string& key);

// What `--plan auto` runs when no plan is cached: tunes a validated run config and writes the plan to `file`
// (lab/tune.h registers the autotuner at load time). Returns the plan.
using PlanTuner = std::function<TunedPlan(const config::Config& config, const std::filesystem::path& file)>;
void set_plan_tuner(PlanTuner tuner);

// Applies a tuned plan to a loaded config below `args` (the command line's key=value, which win): `value` is a path,
// or `auto` (the cached plan for this config and machine, tuned and cached first when there is none). The plan's
// settings take the file's origin; a plan row (key "tuned") says what it set, and when it was tuned for another
// config or machine. Returns the config with the plan and then `args` applied, validated.
config::Config apply_tuned_plan(config::Config loaded, const std::vector<std::string>& args, const std::string& value);

}  // namespace bellows::app
