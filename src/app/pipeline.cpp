// Pipelines of runs; see pipeline.h.
#include "bellows/app/pipeline.h"

#include <fmt/format.h>
#include <yaml-cpp/yaml.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <optional>

#include "bellows/app/run.h"
#include "bellows/app/run_settings.h"
#include "bellows/app/schema.h"
#include "bellows/config/config.h"
#include "bellows/obs/memory.h"
#include "bellows/plan/plan.h"
#include "bellows/hw/hardware_info.h"
#include "bellows/util/check.h"

namespace bellows::app {
namespace fs = std::filesystem;

namespace {

YAML::Node load_yaml(const fs::path& file) {
  BELLOWS_CHECK_CONFIG(fs::is_regular_file(file), fmt::format("config file {} does not exist", file.string()),
                       "check the path");
  {
    std::ifstream readable(file);  // yaml-cpp reports an unreadable file as "bad file" with no reason
    const int error = errno;
    BELLOWS_CHECK_CONFIG(readable.good(), fmt::format("config file {} cannot be read: {}", file.string(), std::strerror(error)),
                         "check the file's permissions");
  }
  try {
    return YAML::LoadFile(file.string());
  } catch (const YAML::Exception& e) {
    BELLOWS_FAIL(ErrorKind::kConfig, fmt::format("{}:{}:{}: {}", file.string(), e.mark.line + 1, e.mark.column + 1, e.msg),
                 "fix the YAML syntax");
  }
}

// The error of a stage, with the stage named in front of its message.
[[noreturn]] void rethrow_in_stage(const Error& e, std::size_t i, std::size_t n, const fs::path& config) {
  throw Error(e.kind(), fmt::format("pipeline stage {} of {} ({}): {}", i + 1, n, config.filename().string(), e.message()), e.hint());
}

void print(const RunOptions& options, const std::string& text) {
  if (options.console) std::fprintf(options.console, "%s\n", text.c_str());
}

}  // namespace

bool is_pipeline_file(const fs::path& file) {
  const YAML::Node root = load_yaml(file);
  return root.IsMap() && root["pipeline"].IsDefined();
}

std::vector<fs::path> pipeline_stages(const fs::path& file) {
  const YAML::Node root = load_yaml(file);
  BELLOWS_CHECK_CONFIG(root.IsMap() && root["pipeline"].IsDefined(), fmt::format("{} has no 'pipeline' key", file.string()),
                       "a pipeline file is: pipeline: [a.yaml, b.yaml]");
  for (const auto& kv : root) {
    const std::string key = kv.first.as<std::string>();
    BELLOWS_CHECK_CONFIG(key == "pipeline",
                         fmt::format("{}:{}: unknown key '{}' in a pipeline file", file.string(), kv.first.Mark().line + 1, key),
                         "a pipeline file has only 'pipeline'; put run settings in the stage configs or on the command line");
  }
  const YAML::Node list = root["pipeline"];
  BELLOWS_CHECK_CONFIG(list.IsSequence() && list.size() > 0,
                       fmt::format("{}:{}: 'pipeline' must be a non-empty list of config files", file.string(), list.Mark().line + 1),
                       "write pipeline: [mlp.yaml, lstm.yaml]");
  std::vector<fs::path> stages;
  for (std::size_t i = 0; i < list.size(); ++i) {
    const YAML::Node entry = list[i];
    BELLOWS_CHECK_CONFIG(entry.IsScalar() && !entry.Scalar().empty(),
                         fmt::format("{}:{}: pipeline entry {} must be a config file path", file.string(), entry.Mark().line + 1, i),
                         "list config files, relative to the pipeline file");
    fs::path p = entry.Scalar();
    if (p.is_relative()) p = file.parent_path() / p;
    BELLOWS_CHECK_CONFIG(fs::is_regular_file(p),
                         fmt::format("{}:{}: pipeline entry {}: config file {} does not exist", file.string(), entry.Mark().line + 1, i,
                                     p.string()),
                         "paths are relative to the pipeline file");
    stages.push_back(p);
  }
  return stages;
}

std::vector<StageResult> run_pipeline(const fs::path& file, const std::vector<std::string>& args, const RunOptions& options) {
  const std::vector<fs::path> stages = pipeline_stages(file);
  const std::size_t n = stages.size();
  // Every stage resolves before the first one trains.
  std::vector<config::Config> configs;
  for (std::size_t i = 0; i < n; ++i) {
    try {
      configs.push_back(resolve_config(stages[i], args));
    } catch (const Error& e) {
      rethrow_in_stage(e, i, n, stages[i]);
    }
  }
  std::vector<StageResult> results;
  for (std::size_t i = 0; i < n; ++i) {
    StageResult r;
    r.config = stages[i];
    r.name = run_settings(configs[i]).name;
    print(options, fmt::format("=== pipeline stage {} of {}: {} (run '{}') ===", i + 1, n, stages[i].string(), r.name));
    const plan::Plan p = plan::resolve(plan_request(configs[i]), hw::HardwareInfo::get());
    obs::install_cpu_tracking();
    obs::reset_session_peak(p.device);
    try {
      r.run = run(configs[i], options);  // the model, trainer and loaders live and die inside run()
    } catch (const Error& e) {
      rethrow_in_stage(e, i, n, stages[i]);
    }
    const obs::MemoryStats during = obs::memory_stats(p.device);
    obs::release_cached_memory(p.device);
    const obs::MemoryStats after = obs::memory_stats(p.device);
    if (during.tracked) r.peak_bytes = during.session_peak_bytes;
    if (after.tracked) r.left_bytes = after.current_bytes;
    print(options, fmt::format("stage {} released: tensor memory {} after the stage (peak during the stage {})", i + 1,
                               after.tracked ? fmt::format("{:.1f} MB", after.current_bytes / 1e6) : std::string("not counted"),
                               during.tracked ? fmt::format("{:.1f} MB", during.session_peak_bytes / 1e6) : std::string("not counted")));
    const bool interrupted = r.run.fit.interrupted;
    results.push_back(std::move(r));
    if (interrupted) break;
  }
  if (options.console) {
    print(options, "pipeline summary:");
    print(options, fmt::format("  {:<4} {:<24} {:>8} {:>12} {:>10} {:>12}", "#", "run", "steps", "final loss", "time s", "peak MB"));
    for (std::size_t i = 0; i < results.size(); ++i) {
      const auto& r = results[i];
      print(options, fmt::format("  {:<4} {:<24} {:>8} {:>12.6g} {:>10.1f} {:>12}", i + 1, r.name, r.run.fit.steps, r.run.fit.final_loss,
                                 r.run.fit.seconds, r.peak_bytes >= 0 ? fmt::format("{:.1f}", r.peak_bytes / 1e6) : std::string("-")));
    }
  }
  return results;
}

}  // namespace bellows::app
