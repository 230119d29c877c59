// The help of the commands that read a run config (train, plan, doctor, cv, bench, config show, slurm, launch): CLI11
// writes a command that takes its own arguments as "bellows train [OPTIONS]", which hides the config file and the
// overrides; these helpers write the usage line as the command reads it and name the models and where the keys are.
#include <fmt/format.h>

#include <memory>

#include "bellows/models/registry.h"
#include "command.h"

namespace bellows::cli {
namespace {

// CLI11's formatter with the usage lines written out ("Usage: bellows train [CONFIG.yaml] [key=value ...] [OPTIONS]").
class UsageFormatter : public CLI::Formatter {
 public:
  explicit UsageFormatter(std::vector<std::string> forms) : forms_(std::move(forms)) {}

  std::string make_usage(const CLI::App* /*app*/, std::string name) const override {
    std::string out;
    for (std::size_t i = 0; i < forms_.size(); ++i) {
      out += fmt::format("{}{} {}\n", i == 0 ? "Usage: " : "       ", name, forms_[i]);
    }
    return out;
  }

 private:
  std::vector<std::string> forms_;
};

}  // namespace

std::string models_and_keys_help() {
  std::string out = "Models (model.name=NAME):";
  for (const auto& entry : models::registry()) out += fmt::format("\n  {:<14} {}", entry.name, entry.help);
  return out +
         "\nKeys: bellows config keys lists every key with its type, default and allowed values (bellows config keys "
         "--model NAME: with that model's own); bellows config show [CONFIG.yaml] [key=value ...] prints the resolved "
         "config.";
}

void describe_config_command(CLI::App* cmd, std::vector<std::string> forms, std::function<std::string()> text) {
  cmd->formatter(std::make_shared<UsageFormatter>(std::move(forms)));
  // Built when help is shown (the registry is complete by then); CLI11 prints the inherited footer, the exit codes,
  // after it.
  cmd->footer([text = std::move(text)] {
    const std::string own = text ? text() : std::string();
    return (own.empty() ? std::string() : own + "\n\n") + models_and_keys_help() + "\n";
  });
}

}  // namespace bellows::cli
