// `bellows selftest [--device cpu|cuda|auto] [--json]`: every device path of bellows run once, a table of
// pass/fail/skipped with the measurement behind each (app/selftest.h). Exit 0 when nothing failed (skips included:
// `--device cuda` on a machine without a GPU skips every check, saying why), 1 when a check failed.
#include <iostream>

#include "bellows/lab/selftest.h"
#include "command.h"
#include "exit_codes.h"

namespace bellows::cli {

Action register_selftest(CLI::App& app) {
  auto device = std::make_shared<std::string>("auto");
  auto json = std::make_shared<bool>(false);
  CLI::App* cmd = app.add_subcommand("selftest", "Run every device path (autocast, loss scaling, fused optimizers, copies, stager, memory "
                                                 "statistics, attention, channels_last, CUDA graphs, all-reduce, determinism) and report each");
  cmd->add_option("--device", *device, "cpu, cuda or auto (a GPU when one is usable)")->check(CLI::IsMember({"cpu", "cuda", "auto"}));
  cmd->add_flag("--json", *json, "Print the report as one JSON document");
  return [cmd, device, json]() {
    if (!cmd->parsed()) return -1;
    const lab::SelftestReport report = lab::run_selftest(*device);
    std::cout << (*json ? lab::selftest_json(report).dump(2) + "\n" : lab::format_selftest(report)) << std::flush;
    return report.passed() ? kExitOk : kExitFailure;
  };
}

}  // namespace bellows::cli
