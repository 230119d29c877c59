// `bellows bench data [CONFIG] [key=value ...] [--json] [--batches N] [--warmup N] [--no-sweep]
//  [--sweep-workers 0,1,2] [--sweep-prefetch 2,4,8]`: measures the data pipeline alone (see train/bench_data.h).
#include <fmt/format.h>

#include <charconv>
#include <iostream>

#include "bellows/hw/hardware_info.h"
#include "bellows/app/bench_data.h"
#include "bellows/app/run.h"
#include "bellows/app/schema.h"
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

}  // namespace

Action register_bench(CLI::App& app) {
  CLI::App* bench = app.add_subcommand("bench", "Measure parts of the pipeline");
  CLI::App* data = bench->add_subcommand(
      "data", "Data pipeline throughput without a model: bellows bench data [CONFIG] [key=value ...] [--json] [--batches N] "
              "[--warmup N] [--no-sweep] [--sweep-workers 0,1,2] [--sweep-prefetch 2,4,8]");
  data->prefix_command(true);
  bench->require_subcommand(1);
  return [data]() {
    if (!data->parsed()) return -1;
    app::DataBenchOptions options;
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
    std::optional<std::filesystem::path> file;
    if (!rest.empty() && rest[0].find('=') == std::string::npos && rest[0].rfind("-", 0) != 0) {
      file = rest[0];
      rest.erase(rest.begin());
    }
    const config::Config config = app::resolve_config(file, rest);
    const plan::Plan plan = plan::resolve(app::plan_request(config), hw::HardwareInfo::get());
    plan::apply(plan);
    const app::DataBenchReport report = app::bench_data(config, plan, options);
    std::cout << (json ? report.to_json() : report.table());
    return kExitOk;
  };
}

}  // namespace bellows::cli
