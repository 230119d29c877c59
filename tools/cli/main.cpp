// The `bellows` command: parses the command line (CLI11), runs one subcommand, and maps every error to an
// exit code with a one-line cause and a hint. Nothing below this file calls exit().
#include <CLI/CLI.hpp>

#include <fmt/format.h>

#include <csignal>
#include <iostream>

#include "bellows/util/error.h"
#include "bellows/util/exception_report.h"
#include "bellows/util/suggest.h"
#include "bellows/version.h"
#include "command.h"
#include "exit_codes.h"

namespace bellows::cli {
namespace {

int usage_error(const std::string& message, const std::string& hint) {
  std::cerr << "bellows: error: " << message << "\n";
  if (!hint.empty()) std::cerr << "---> HINT: " << hint << "\n";
  return kExitUsage;
}

std::vector<std::string> option_names(const CLI::App& app) {
  std::vector<std::string> names;
  for (const CLI::Option* opt : app.get_options()) {
    for (const auto& n : opt->get_lnames()) names.push_back("--" + n);
    for (const auto& n : opt->get_snames()) names.push_back("-" + n);
  }
  return names;
}

std::vector<std::string> subcommand_names(const CLI::App& app) {
  std::vector<std::string> names;
  for (const CLI::App* sub : app.get_subcommands({})) names.push_back(sub->get_name());
  return names;
}

// An argument nobody claimed: an unknown subcommand at the top, an unknown option or stray value below.
int unknown_argument(const CLI::App& app, const CLI::App* sub, const std::string& arg) {
  const bool is_option = !arg.empty() && arg[0] == '-';
  const std::string name = is_option ? arg.substr(0, arg.find('=')) : arg;
  const CLI::App& scope = sub ? *sub : app;
  const auto candidates = is_option ? option_names(scope) : subcommand_names(app);
  const auto match = closest_match(name, candidates);
  const std::string where = sub ? fmt::format("'bellows {}'", sub->get_name()) : std::string("bellows");
  const std::string what = is_option ? fmt::format("unknown option '{}' for {}", name, where)
                           : sub     ? fmt::format("unexpected argument '{}' for {}", name, where)
                                     : fmt::format("unknown command '{}'", name);
  const std::string help = sub ? fmt::format("'bellows {} --help' lists its options", sub->get_name())
                               : std::string("'bellows --help' lists the commands");
  return usage_error(match ? fmt::format("{}; did you mean '{}'?", what, *match) : what, help);
}

int run(int argc, char** argv) {
  CLI::App app{"bellows: a hardware-aware deep-learning training engine for C++ on LibTorch", "bellows"};
  app.set_version_flag("--version", std::string("bellows ") + BELLOWS_VERSION);
  app.allow_extras();
  app.require_subcommand(0, 1);
  app.footer("Exit codes: 0 ok, 1 failure, 2 usage or configuration error, 3 input data error, "
             "4 resource error, 5 interrupted after a clean checkpoint, 130 interrupted without a checkpoint.");
  std::vector<Action> actions = {register_hw(app), register_train(app), register_config(app), register_bench(app),
                                 register_ckpt(app),   register_predict(app), register_cv(app), register_launch(app), register_slurm(app),
                                 register_doctor(app), register_plan(app), register_selftest(app)};
  for (CLI::App* sub : app.get_subcommands({})) sub->allow_extras();

  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForVersion& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    return usage_error(e.what(), "'bellows --help' lists the commands and their options");
  }

  CLI::App* selected = app.get_subcommands().empty() ? nullptr : app.get_subcommands().front();
  // A subcommand that takes a command line of its own (launch -- train ...) gets what follows "--" too.
  const bool takes_rest = selected && selected->get_name() == "launch";
  if (!app.remaining().empty() && !takes_rest) return unknown_argument(app, selected, app.remaining().front());
  // Subcommands that take free-form arguments (train, config show) read their own remaining arguments.
  if (selected && !selected->get_prefix_command() && !selected->remaining().empty()) {
    return unknown_argument(app, selected, selected->remaining().front());
  }
  if (selected == nullptr) {
    std::cout << app.help();
    return kExitOk;
  }
  for (const auto& action : actions) {
    if (const int code = action(); code >= 0) return code;
  }
  return usage_error("no command ran", "'bellows --help' lists the commands");
}

}  // namespace
}  // namespace bellows::cli

int main(int argc, char** argv) {
  using namespace bellows;
  // A file-size limit (ulimit -f) would kill the process at the write that crosses it; ignored, that write fails
  // with EFBIG and is reported like a full disk (exit code 4, the file named, earlier checkpoints intact).
  std::signal(SIGXFSZ, SIG_IGN);
  try {
    return cli::run(argc, argv);
  } catch (...) {
    // One line naming the kind (and where a bellows error was raised), then the hint (util/exception_report.h).
    const ExceptionReport r = report_current_exception();
    std::cerr << "bellows: " << to_string(r.kind) << ": " << (r.message.empty() ? "out of memory" : r.message)
              << (r.location.empty() ? "" : " [" + r.location + "]") << "\n";
    if (!r.hint.empty()) std::cerr << "---> HINT: " << r.hint << "\n";
    return cli::exit_code(r.kind);
  }
}
