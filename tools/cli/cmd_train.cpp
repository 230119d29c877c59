// `bellows train [CONFIG] [key=value | --flag value ...]`: trains from a config (or the embedded demo),
// writing runs/<name>/. Ctrl-C (SIGINT) or SIGTERM stops at the next step boundary with a clean message.
// A CONFIG with a top-level `pipeline:` list trains several runs in order (app/pipeline.h).
// `bellows config show [CONFIG] [overrides]`: prints the resolved configuration.
#include <fmt/format.h>

#include <csignal>
#include <iostream>

#include "bellows/app/pipeline.h"
#include "bellows/app/profiles.h"
#include "bellows/app/run.h"
#include "bellows/app/schema.h"
#include "command.h"
#include "exit_codes.h"

namespace bellows::cli {
namespace {

std::atomic<bool> g_stop{false};
static_assert(std::atomic<bool>::is_always_lock_free, "the signal handler needs a lock-free flag");

extern "C" void on_stop_signal(int) { g_stop.store(true); }

// Everything after the subcommand, in order, is ours: [CONFIG] then key=value overrides and alias flags.
void take_free_arguments(CLI::App* cmd) { cmd->prefix_command(true); }

const char* type_name(config::Type t) {
  switch (t) {
    case config::Type::kBool: return "bool";
    case config::Type::kInt: return "int";
    case config::Type::kDouble: return "float";
    case config::Type::kString: return "string";
    case config::Type::kStringList: return "[string]";
    case config::Type::kIntList: return "[int]";
    case config::Type::kDoubleList: return "[float]";
  }
  return "?";
}

// The flags that are not a key's alias, taken by every command that reads a config (train, plan, doctor, bench,
// cv, slurm, config show): they choose what is composed (app/profiles.h, app/tuned_plan.h) before the keys are read.
constexpr const char* kFileFlagsHelp =
    "--hardware-profile NAME (the key hardware_profile) and --plan FILE|auto (a plan written by bellows plan, or "
    "auto: tuned once per machine and cached)";

std::string describe_keys(const config::Schema& schema) {
  std::map<std::string, std::string> flags;
  for (const auto& [flag, key] : schema.aliases()) flags[key] = flag;
  std::string out;
  // The keys that name files to compose (config/config.h): consumed when the config is loaded, never in the tree.
  out += std::string(config::kExperimentKey) +
         " (string)\n    a config file whose keys this one's override (a path, relative to the file that names it)\n";
  std::string profiles = "auto|none";
  try {
    for (const std::string& name : app::profile_names()) profiles += "|" + name;
  } catch (const Error&) {  // no shipped profiles found: the list says so rather than failing
    profiles += "|(no shipped profiles found)";
  }
  out += std::string(config::kHardwareProfileKey) + " (string) = auto {" + profiles +
         "|a file path} flag --hardware-profile\n    the hardware profile composed below the config's keys: auto "
         "(chosen from the machine), none, a shipped profile or a file (docs/hw.md)\n";
  for (const auto& [key, spec] : schema.keys()) {
    std::string line = key + " (" + type_name(spec.type) + ")";
    if (spec.default_value) {
      YAML::Emitter e;
      e << YAML::Flow << *spec.default_value;
      line += " = " + std::string(e.c_str());
    }
    if (spec.required) line += " [required]";
    std::string allowed;
    for (const auto& c : spec.choices) allowed += (allowed.empty() ? "" : "|") + c;
    if (!allowed.empty()) line += " {" + allowed + "}";
    if (spec.min || spec.max) {
      line += " in [" + (spec.min ? fmt::format("{}", *spec.min) : std::string("-inf")) + ", " +
              (spec.max ? fmt::format("{}", *spec.max) : std::string("inf")) + "]";
    }
    if (flags.count(key)) line += " flag " + flags[key];
    out += line + "\n    " + spec.help + "\n";
  }
  return out;
}

}  // namespace

Action register_train(CLI::App& app) {
  CLI::App* cmd = app.add_subcommand(
      "train", "Train a model: bellows train [CONFIG] [key=value ...] [--flag value ...]; no CONFIG: the embedded demo; "
               "outputs in <output_dir>/<name>/");
  take_free_arguments(cmd);
  describe_config_command(cmd, {"[CONFIG.yaml] [key=value ...] [OPTIONS]"}, [] {
    // every alias of the schema, then the flags that are not keys
    const config::Schema schema = app::run_schema("mlp");  // kept: aliases() refers into it
    std::string flags;
    for (const auto& [flag, key] : schema.aliases()) flags += fmt::format("\n  {:<22} {}", flag, key);
    return "Flags (each sets the key beside it; any key: key=value, e.g. optim.lr=3e-4; all keys: bellows config keys):" + flags +
           "\nAlso " + std::string(kFileFlagsHelp) + ".";
  });
  return [cmd]() {
    if (!cmd->parsed()) return -1;
    auto [file, overrides] = split_config_args(cmd->remaining());
    app::RunOptions options;
    options.stop_flag = &g_stop;
    app::RunResult result;
    if (file && app::is_pipeline_file(*file)) {  // several runs, one after another (app/pipeline.h)
      app::pipeline_stages(*file);               // a malformed pipeline fails before signals are taken
      std::signal(SIGINT, on_stop_signal);
      std::signal(SIGTERM, on_stop_signal);
      result = app::run_pipeline(*file, overrides, options).back().run;
    } else {
      const config::Config config = app::resolve_config(file, overrides);
      std::signal(SIGINT, on_stop_signal);
      std::signal(SIGTERM, on_stop_signal);
      result = app::run(config, options);
    }
    if (result.fit.interrupted) {
      if (!result.fit.checkpoint.empty()) {
        std::cerr << "bellows: interrupted at optimizer step " << result.fit.steps << "; checkpoint written to "
                  << result.fit.checkpoint.string() << "; continue with --resume auto\n";
        return kExitInterrupted;
      }
      std::cerr << "bellows: interrupted at optimizer step " << result.fit.steps << "; outputs so far are in "
                << result.run_dir.string() << " (no checkpoint: checkpoint.enabled is false)\n";
      return kExitSignal;
    }
    return kExitOk;
  };
}

Action register_config(CLI::App& app) {
  CLI::App* cfg = app.add_subcommand("config", "Inspect configurations");
  CLI::App* show = cfg->add_subcommand(
      "show", "Print the resolved config: bellows config show [CONFIG] [key=value ...] (files composed, overrides applied, "
              "defaults filled)");
  take_free_arguments(show);
  describe_config_command(show, {"[CONFIG.yaml] [key=value ...]"});
  auto model = std::make_shared<std::string>("mlp");
  CLI::App* keys = cfg->add_subcommand("keys", "List every config key of a run: type, default, allowed values, help");
  keys->add_option("--model", *model, "Include the keys of this registered model")->capture_default_str();
  cfg->require_subcommand(1);
  return [show, keys, model]() {
    if (show->parsed()) {
      auto [file, overrides] = split_config_args(show->remaining());
      std::cout << app::resolve_config(file, overrides).to_yaml();
      return kExitOk;
    }
    if (keys->parsed()) {
      std::cout << describe_keys(app::run_schema(*model)) << "Flags that are not keys: " << kFileFlagsHelp << "\n";
      return kExitOk;
    }
    return -1;
  };
}

}  // namespace bellows::cli
