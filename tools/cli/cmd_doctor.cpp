// `bellows doctor [CONFIG] [key=value | --flag value ...] [--budget 60s] [--json]`: short measured trials of the
// configured run and a diagnosis (app/doctor.h). The report goes to stdout, one line per trial to stderr while
// they run. Exit 0 whatever the diagnosis; a bad config or argument exits as `bellows train` would.
#include <fmt/format.h>

#include <iostream>

#include "bellows/lab/doctor.h"
#include "bellows/app/schema.h"
#include "command.h"
#include "exit_codes.h"

namespace bellows::cli {

Action register_doctor(CLI::App& app) {
  CLI::App* cmd = app.add_subcommand(
      "doctor", "Measure short trials of a run and diagnose it: bellows doctor [CONFIG] [key=value ...] [--budget 60s] [--json]; "
                "input-bound, precision, overhead, memory, threads, NaN/Inf, first step; every advice measured here");
  cmd->prefix_command(true);  // [CONFIG] and overrides, as for `bellows train`; --budget and --json anywhere
  describe_config_command(cmd, {"[CONFIG.yaml] [key=value ...] [OPTIONS]"}, [] {
    return "--budget D   time for all trials together (60s, 2m; default 60s)\n"
           "--json       print the report as one JSON document";
  });
  return [cmd]() {
    if (!cmd->parsed()) return -1;
    std::vector<std::string> args = cmd->remaining();
    lab::DoctorOptions options;
    const bool json = take_flag(args, "--json");
    if (const auto budget = take_flag_value(args, "--budget")) options.budget_s = parse_duration("--budget", *budget);
    const auto [file, overrides] = split_config_args(args);
    const config::Config config = app::resolve_config(file, overrides);
    options.stop_flag = stop_on_signals();
    const lab::DoctorReport report = lab::doctor(config, options);
    std::cout << (json ? report.to_json().dump(2) + "\n" : report.to_text()) << std::flush;
    return kExitOk;
  };
}

}  // namespace bellows::cli
