// `bellows doctor [CONFIG] [key=value | --flag value ...] [--budget 60s] [--json]`: short measured trials of the
// configured run and a diagnosis (app/doctor.h). The report goes to stdout, one line per trial to stderr while
// they run. Exit 0 whatever the diagnosis; a bad config or argument exits as `bellows train` would.
#include <fmt/format.h>

#include <charconv>
#include <cmath>
#include <csignal>
#include <iostream>

#include "bellows/app/doctor.h"
#include "bellows/app/schema.h"
#include "bellows/util/check.h"
#include "command.h"
#include "exit_codes.h"

namespace bellows::cli {
namespace {

std::atomic<bool> g_doctor_stop{false};
extern "C" void on_doctor_stop_signal(int) { g_doctor_stop.store(true); }

// "60s", "60", "1.5m", "2min": seconds.
double parse_budget(const std::string& text) {
  double v = 0;
  const auto [p, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  const std::string unit(p, text.data() + text.size());
  double scale = 0;
  if (unit.empty() || unit == "s" || unit == "sec") scale = 1;
  else if (unit == "m" || unit == "min") scale = 60;
  else if (unit == "h") scale = 3600;
  BELLOWS_CHECK_USAGE(ec == std::errc{} && scale > 0 && v > 0 && std::isfinite(v),
                      fmt::format("--budget '{}' is not a positive duration", text), "write e.g. --budget 60s, --budget 2m");
  return v * scale;
}

}  // namespace

Action register_doctor(CLI::App& app) {
  CLI::App* cmd = app.add_subcommand(
      "doctor", "Measure short trials of a run and diagnose it: bellows doctor [CONFIG] [key=value ...] [--budget 60s] [--json]; "
                "input-bound, precision, overhead, memory, threads, NaN/Inf, first step; every advice measured here");
  cmd->prefix_command(true);  // [CONFIG] and overrides, as for `bellows train`; --budget and --json anywhere
  cmd->footer("--budget D   time for all trials together (60s, 2m; default 60s)\n--json       print the report as one JSON document");
  return [cmd]() {
    if (!cmd->parsed()) return -1;
    std::vector<std::string> args;
    app::DoctorOptions options;
    bool json = false;
    const std::vector<std::string> given = cmd->remaining();
    for (std::size_t i = 0; i < given.size(); ++i) {
      if (given[i] == "--json") {
        json = true;
      } else if (given[i] == "--budget") {
        BELLOWS_CHECK_USAGE(i + 1 < given.size(), "--budget needs a value", "write e.g. --budget 60s");
        options.budget_s = parse_budget(given[++i]);
      } else if (given[i].rfind("--budget=", 0) == 0) {
        options.budget_s = parse_budget(given[i].substr(9));
      } else {
        args.push_back(given[i]);
      }
    }
    std::optional<std::filesystem::path> file;
    if (!args.empty() && args[0].find('=') == std::string::npos && args[0].rfind("-", 0) != 0) {
      file = args[0];
      args.erase(args.begin());
    }
    const config::Config config = app::resolve_config(file, args);
    std::signal(SIGINT, on_doctor_stop_signal);
    std::signal(SIGTERM, on_doctor_stop_signal);
    options.stop_flag = &g_doctor_stop;
    const app::DoctorReport report = app::doctor(config, options);
    std::cout << (json ? report.to_json().dump(2) + "\n" : report.to_text()) << std::flush;
    return kExitOk;
  };
}

}  // namespace bellows::cli
