// `bellows bench data [CONFIG] [key=value ...] [--json] [--batches N] [--warmup N] [--no-sweep]
//  [--sweep-workers 0,1,2] [--sweep-prefetch 2,4,8]`: measures the data pipeline alone (see app/bench_data.h).
// `bellows bench [CONFIG] [key=value ...] --matrix [--rounds 3] [--trial-seconds 3s] [--out DIR] [--json]`: the
// optimization matrix (app/bench_matrix.h): the table (or --json) on stdout, matrix.json, matrix.svg and
// matrix.png in DIR (default bench-matrix).
#include <fmt/format.h>

#include <charconv>
#include <iostream>

#include "bellows/hw/hardware_info.h"
#include "bellows/lab/bench_data.h"
#include "bellows/lab/bench_matrix.h"
#include "bellows/app/run.h"
#include "bellows/app/schema.h"
#include "bellows/obs/bar_chart.h"
#include "bellows/util/atomic_file.h"
#include "bellows/util/check.h"
#include "command.h"
#include "exit_codes.h"

namespace bellows::cli {
namespace {

std::int64_t parse_count(const std::string& flag, const std::string& text) {
  std::int64_t v = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  BELLOWS_CHECK_USAGE(ec == std::errc() && end == text.data() + text.size() && v >= 0,
                      fmt::format("{} expects a non-negative integer, got '{}'", flag, text), fmt::format("e.g. {} 20", flag));
  return v;
}

std::vector<std::int64_t> parse_list(const std::string& flag, const std::string& text) {
  std::vector<std::int64_t> out;
  std::size_t start = 0;
  while (start <= text.size()) {
    const std::size_t comma = text.find(',', start);
    out.push_back(parse_count(flag, text.substr(start, comma == std::string::npos ? std::string::npos : comma - start)));
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  return out;
}

int run_matrix(std::vector<std::string> args) {
  BELLOWS_CHECK_USAGE(take_flag(args, "--matrix"), "bellows bench needs what to measure: data, or CONFIG --matrix",
                      "bellows bench data [CONFIG] (the data pipeline), bellows bench [CONFIG] --matrix (each optimization on and off)");
  lab::MatrixOptions options;
  const bool json = take_flag(args, "--json");
  if (const auto r = take_flag_value(args, "--rounds")) options.rounds = static_cast<int>(parse_count("--rounds", *r));
  if (const auto s = take_flag_value(args, "--trial-seconds")) options.trial_seconds = parse_duration("--trial-seconds", *s);
  const std::filesystem::path out = take_flag_value(args, "--out").value_or("bench-matrix");
  const auto [file, overrides] = split_config_args(args);
  const config::Config config = app::resolve_config(file, overrides);
  options.stop_flag = stop_on_signals();
  const lab::MatrixReport report = lab::bench_matrix(config, options);
  std::filesystem::create_directories(out);
  write_file_atomically(out / "matrix.json", report.to_json().dump(2) + "\n");
  const obs::BarChart chart = report.chart();
  obs::write_bar_chart_svg(chart, out / "matrix.svg");
  obs::write_bar_chart_png(chart, out / "matrix.png");
  std::cout << (json ? report.to_json().dump(2) + "\n"
                     : report.table() + fmt::format("written: {0}/matrix.json, {0}/matrix.svg, {0}/matrix.png\n", out.string()))
            << std::flush;
  return options.stop_flag->load() ? kExitSignal : kExitOk;
}

}  // namespace

Action register_bench(CLI::App& app) {
  CLI::App* bench = app.add_subcommand(
      "bench", "Measure: bellows bench data [CONFIG] (the data pipeline alone); bellows bench [CONFIG] [key=value ...] --matrix "
               "[--rounds 3] [--trial-seconds 3s] [--out DIR] [--json] (each optimization on and off against the configured run)");
  bench->prefix_command(true);
  describe_config_command(
      bench, {"[CONFIG.yaml] [key=value ...] --matrix [OPTIONS]", "data [CONFIG.yaml] [key=value ...] [OPTIONS]"});
  CLI::App* data = bench->add_subcommand(
      "data", "Data pipeline throughput without a model: bellows bench data [CONFIG] [key=value ...] [--json] [--batches N] "
              "[--warmup N] [--no-sweep] [--sweep-workers 0,1,2] [--sweep-prefetch 2,4,8]");
  data->prefix_command(true);
  describe_config_command(data, {"[CONFIG.yaml] [key=value ...] [OPTIONS]"});
  bench->require_subcommand(0, 1);
  return [bench, data]() {
    if (!bench->parsed()) return -1;
    if (!data->parsed()) return run_matrix(bench->remaining());
    lab::DataBenchOptions options;
    bool json = false;
    std::vector<std::string> rest;
    const std::vector<std::string> args = data->remaining();
    for (std::size_t i = 0; i < args.size(); ++i) {
      const std::string& a = args[i];
      auto value = [&]() -> const std::string& {
        BELLOWS_CHECK_USAGE(i + 1 < args.size(), fmt::format("{} needs a value", a), "see bellows bench data --help");
        return args[++i];
      };
      if (a == "--json") json = true;
      else if (a == "--no-sweep") options.sweep = false;
      else if (a == "--batches") options.batches = parse_count(a, value());
      else if (a == "--warmup") options.warmup = parse_count(a, value());
      else if (a == "--sweep-workers") options.sweep_workers = parse_list(a, value());
      else if (a == "--sweep-prefetch") options.sweep_prefetch = parse_list(a, value());
      else rest.push_back(a);
    }
    const auto [file, overrides] = split_config_args(rest);
    const config::Config config = app::resolve_config(file, overrides);
    const plan::Plan plan = plan::resolve(app::plan_request(config), hw::HardwareInfo::get());
    plan::apply(plan);
    const lab::DataBenchReport report = lab::bench_data(config, plan, options);
    std::cout << (json ? report.to_json() : report.table());
    return kExitOk;
  };
}

}  // namespace bellows::cli
