// A bellows subcommand: registers its options on a CLI11 subcommand and runs once they are parsed.
// Each subcommand lives in its own cmd_<name>.cpp and is listed in main.cpp.
#pragma once

#include <CLI/CLI.hpp>

#include <atomic>
#include <filesystem>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace bellows::cli {

// Adds the subcommand to `app`; returns the action to run when it was selected.
using Action = std::function<int()>;
using Registrar = Action (*)(CLI::App& app);

Action register_hw(CLI::App& app);
Action register_train(CLI::App& app);
Action register_config(CLI::App& app);
Action register_bench(CLI::App& app);
Action register_ckpt(CLI::App& app);
Action register_predict(CLI::App& app);
Action register_cv(CLI::App& app);
Action register_launch(CLI::App& app);
Action register_slurm(CLI::App& app);
Action register_doctor(CLI::App& app);
Action register_plan(CLI::App& app);
Action register_selftest(CLI::App& app);

// This bellows executable's path (/proc/self/exe), or "bellows" when it cannot be read: what `launch -- train`
// starts and what `slurm` writes into the script.
std::string self_executable();

// The free arguments of a run-like command: a first argument that is neither key=value nor a flag is the config
// file; the rest are overrides and flags, in order.
std::pair<std::optional<std::filesystem::path>, std::vector<std::string>> split_config_args(const std::vector<std::string>& args);

// The help of a command that reads a run config (help.cpp): its usage lines, each the command's arguments after its
// name (CLI11 would write "[OPTIONS]" alone: the config file and the overrides are the command's own arguments), and
// a footer of `text` (built when help is shown; may be empty) followed by models_and_keys_help().
void describe_config_command(CLI::App* cmd, std::vector<std::string> forms, std::function<std::string()> text = {});
// The registered models, each with its help, and which commands list the keys and print a resolved config.
std::string models_and_keys_help();

// "60s", "60", "1.5m", "2min", "1h": seconds. kUsage error naming `flag` otherwise.
double parse_duration(const std::string& flag, const std::string& text);

// Takes `flag VALUE` and `flag=VALUE` out of `args`; the last one given, if any (kUsage error without a value).
std::optional<std::string> take_flag_value(std::vector<std::string>& args, const std::string& flag);
// Takes every `flag` (no value) out of `args`; whether there was one.
bool take_flag(std::vector<std::string>& args, const std::string& flag);

// Sends SIGINT and SIGTERM to a flag from now on (measuring commands stop their running trial at its next step and
// report what was measured); the flag.
const std::atomic<bool>* stop_on_signals();

}  // namespace bellows::cli
