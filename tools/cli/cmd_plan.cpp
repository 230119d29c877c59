// `bellows plan [CONFIG] [key=value ...] [--budget 60s] [--json] [--out plan.json] [--grid] [--trial-seconds S]`:
// the autotuner (app/tune.h). Measured trials (one line each on stderr), then the table (or --json) on stdout and
// the tuned plan written to --out (default plan.json) and to the cache that `bellows train --plan auto` reads.
// Ctrl-C stops the running trial at its next step and ends the search with what was measured.
#include <fmt/format.h>

#include <iostream>

#include "bellows/app/schema.h"
#include "bellows/lab/tune.h"
#include "bellows/util/check.h"
#include "command.h"
#include "exit_codes.h"

namespace bellows::cli {

Action register_plan(CLI::App& app) {
  CLI::App* cmd = app.add_subcommand(
      "plan", "Tune a run's settings by measured trials: bellows plan [CONFIG] [key=value ...] [--budget 60s] [--json] [--out plan.json] "
              "[--grid]; then bellows train CONFIG --plan plan.json (or --plan auto)");
  cmd->prefix_command(true);
  describe_config_command(cmd, {"[CONFIG.yaml] [key=value ...] [OPTIONS]"}, [] {
    return "--budget D          time for all trials together (60s, 2m; default 60s)\n"
           "--trial-seconds S   training per full trial (default: budget / 30, 0.5 to 5 s; 8 steps at least)\n"
           "--out FILE          where the tuned plan goes (default plan.json); also cached for --plan auto\n"
           "--grid              measure every point of the space instead (the tuner's reference; ignores --budget)\n"
           "--json              print the plan as JSON instead of the table\n"
           "plan.allow=[precision,batch_size]  let the tuner change settings that change the numerics";
  });
  return [cmd]() {
    if (!cmd->parsed()) return -1;
    std::vector<std::string> args = cmd->remaining();
    lab::TuneOptions options;
    const bool json = take_flag(args, "--json");
    options.grid = take_flag(args, "--grid");
    if (const auto budget = take_flag_value(args, "--budget")) options.budget_s = parse_duration("--budget", *budget);
    if (const auto s = take_flag_value(args, "--trial-seconds")) options.trial_seconds = parse_duration("--trial-seconds", *s);
    const std::filesystem::path out = take_flag_value(args, "--out").value_or("plan.json");
    const auto [file, overrides] = split_config_args(args);
    for (const auto& a : overrides) {
      BELLOWS_CHECK_USAGE(a != "--plan" && a.rfind("--plan=", 0) != 0, "bellows plan writes a plan; --plan is for bellows train",
                          "bellows plan CONFIG --out plan.json, then bellows train CONFIG --plan plan.json");
    }
    const config::Config config = app::resolve_config(file, overrides);
    options.stop_flag = stop_on_signals();
    const lab::TuneReport plan = lab::tune(config, options);
    const bool stopped = options.stop_flag->load();
    // Stopped before a trial other than the baseline ran: nothing was compared, so there is no plan to write.
    if (stopped && plan.trials.size() <= 1) {
      std::cerr << "bellows plan: stopped by a signal during the baseline trial; no plan written\n";
      return kExitSignal;
    }
    lab::write_tuned_plan(plan, out);  // a search cut short still wrote what it measured (its notes say so)
    std::string cached;
    if (!stopped) {  // a search cut short is not a plan for --plan auto to reuse
      const auto path = app::cached_plan_path(plan.config_key, plan.machine_key);
      lab::write_tuned_plan(plan, path);
      cached = path.string();
    }
    std::cout << (json ? plan.to_json().dump(2) + "\n" : plan.to_text()) << std::flush;
    if (!json) {
      std::cout << fmt::format("plan written to {}{}; use it: bellows train{} --plan {}\n", out.string(),
                               cached.empty() ? "" : " (and cached for --plan auto: " + cached + ")", file ? " " + file->string() : "",
                               out.string());
    }
    return stopped ? kExitSignal : kExitOk;
  };
}

}  // namespace bellows::cli
