// `bellows cv [CONFIG] --folds K [key=value | --flag value ...]`: k-fold cross-validation (see train/cv.h). Each
// fold trains a fresh model into <output_dir>/<name>/fold-<k>/; the per-fold metrics with their mean and sample
// std go to a table and to <output_dir>/<name>/cv.json. Ctrl-C stops the running fold at a step boundary.
#include <fmt/format.h>

#include <charconv>
#include <csignal>
#include <iostream>

#include "bellows/lab/cv.h"
#include "bellows/app/schema.h"
#include "bellows/data/build.h"
#include "bellows/util/check.h"
#include "command.h"
#include "exit_codes.h"

namespace bellows::cli {
namespace {

std::atomic<bool> g_stop{false};
extern "C" void on_cv_stop_signal(int) { g_stop.store(true); }

std::int64_t parse_folds(const std::string& text) {
  std::int64_t v = 0;
  const auto [p, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  BELLOWS_CHECK_USAGE(ec == std::errc{} && p == text.data() + text.size() && !text.empty(),
                      fmt::format("--folds '{}' is not an integer", text), "write e.g. --folds 5");
  return v;
}

// Takes "--folds K" / "--folds=K" out of the free arguments (they may follow the config file).
std::optional<std::int64_t> take_folds(std::vector<std::string>& args) {
  std::optional<std::int64_t> folds;
  for (std::size_t i = 0; i < args.size();) {
    if (args[i] == "--folds") {
      BELLOWS_CHECK_USAGE(i + 1 < args.size(), "--folds needs a value", "write e.g. --folds 5");
      folds = parse_folds(args[i + 1]);
      args.erase(args.begin() + static_cast<std::ptrdiff_t>(i), args.begin() + static_cast<std::ptrdiff_t>(i) + 2);
    } else if (args[i].rfind("--folds=", 0) == 0) {
      folds = parse_folds(args[i].substr(8));
      args.erase(args.begin() + static_cast<std::ptrdiff_t>(i));
    } else {
      ++i;
    }
  }
  return folds;
}

}  // namespace

Action register_cv(CLI::App& app) {
  CLI::App* cmd = app.add_subcommand(
      "cv", "K-fold cross-validation: bellows cv [CONFIG] --folds K [key=value ...]; each fold trains a fresh model "
            "(stratified folds for class labels); outputs in <output_dir>/<name>/fold-<k>/ and cv.json");
  auto folds = std::make_shared<std::string>();
  cmd->add_option("--folds", *folds, "folds (default: data.cv.folds when set, else 5)")->type_name("K");
  cmd->prefix_command(true);  // [CONFIG] and overrides, as for `bellows train`
  describe_config_command(cmd, {"[CONFIG.yaml] [key=value ...] [OPTIONS]"}, [] {
    return "The held-out fold is the validation data of its run; the table reports the last evaluation of each fold, "
           "the mean and the sample standard deviation (ddof 1).";
  });
  return [cmd, folds]() {
    if (!cmd->parsed()) return -1;
    std::vector<std::string> args = cmd->remaining();
    std::optional<std::int64_t> k = folds->empty() ? std::nullopt : std::optional<std::int64_t>(parse_folds(*folds));
    if (auto later = take_folds(args)) k = later;
    std::optional<std::filesystem::path> file;
    if (!args.empty() && args[0].find('=') == std::string::npos && args[0].rfind("-", 0) != 0) {
      file = args[0];
      args.erase(args.begin());
    }
    const config::Config config = app::resolve_config(file, args);
    if (const std::int64_t configured = data::data_options(config).cv_folds; !k) k = configured > 0 ? configured : 5;
    std::signal(SIGINT, on_cv_stop_signal);
    std::signal(SIGTERM, on_cv_stop_signal);
    app::RunOptions options;
    options.stop_flag = &g_stop;
    const lab::CvSummary summary = lab::cross_validate(config, *k, options);
    std::cout << "\n" << lab::cv_table(summary) << std::flush;
    if (summary.interrupted) {
      std::cerr << "bellows: cross-validation interrupted in fold " << summary.results.size() << "; completed folds are in "
                << summary.dir.string() << "\n";
      return kExitInterrupted;
    }
    return kExitOk;
  };
}

}  // namespace bellows::cli
