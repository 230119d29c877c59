// A bellows subcommand: registers its options on a CLI11 subcommand and runs once they are parsed.
// Each subcommand lives in its own cmd_<name>.cpp and is listed in main.cpp.
#pragma once

#include <CLI/CLI.hpp>

#include <functional>
#include <memory>
#include <string>

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

// This bellows executable's path (/proc/self/exe), or "bellows" when it cannot be read: what `launch -- train`
// starts and what `slurm` writes into the script.
std::string self_executable();

}  // namespace bellows::cli
