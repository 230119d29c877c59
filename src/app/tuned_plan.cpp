// Tuned plans as a config's input; see tuned_plan.h.
#include "bellows/app/tuned_plan.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <fstream>

#include "bellows/app/schema.h"  // defines: resolve_loaded_config
#include "bellows/util/cache.h"
#include "bellows/util/check.h"

namespace bellows::app {
namespace fs = std::filesystem;

namespace tuned_plan_impl {  // named, not anonymous: the unity build compiles this file with the other app sources

std::string hex(std::uint64_t v) { return fmt::format("{:016x}", v); }

// The key of a "key=value" override.
std::string key_of(const std::string& assignment) { return assignment.substr(0, assignment.find('=')); }

PlanTuner& plan_tuner() {  // function-local: the registering library's static initialisers may run first
  static PlanTuner tuner;
  return tuner;
}

}  // namespace tuned_plan_impl

using namespace tuned_plan_impl;

bool on_command_line(const config::Config& c, const std::string& key) {
  if (!c.has(key)) return false;
  const config::Origin& o = c.origin(key);
  return o.file.empty() && o.note.rfind("command line", 0) == 0;
}

std::string machine_line(const hw::HardwareInfo& hw) {
  std::string gpus;
  for (const auto& g : hw.cuda.gpus) gpus += fmt::format(", GPU {} ({:.0f} GiB)", g.name, g.total_memory_bytes / double(1LL << 30));
  return fmt::format("{}, {} usable cores, {:.1f} GiB RAM{}, LibTorch {}", hw.cpu.model_name, hw.cpu.usable_cpus,
                     hw.memory.total_bytes / double(1LL << 30), gpus, hw.torch.version);
}

std::string tune_config_key(const config::Config& c) {
  YAML::Node root = YAML::Load(c.to_yaml());  // keys sorted
  for (const char* k : {"name", "output_dir", "resume", "seed", "checkpoint", "log"}) root.remove(k);
  if (root["train"]) {
    for (const char* k : {"epochs", "max_steps", "eval_every_n_steps", "log_every_n_steps"}) root["train"].remove(k);
  }
  YAML::Emitter e;
  e << root;
  return hex(fnv1a(e.c_str()));
}

std::string tune_machine_key(const hw::HardwareInfo& hw) {
  std::uint64_t h = fnv1a(hw.cpu.model_name);
  h = fnv1a(fmt::format("|{}|{}|", hw.cpu.usable_cpus, hw.memory.total_bytes >> 30), h);
  for (const auto& g : hw.cuda.gpus) h = fnv1a(fmt::format("{}|{}|", g.name, g.total_memory_bytes >> 30), h);
  return hex(fnv1a(hw.torch.version, h));
}

fs::path cached_plan_path(const std::string& config_key, const std::string& machine_key) {
  const fs::path cache = user_cache_dir();
  BELLOWS_CHECK_RESOURCE(!cache.empty(), "--plan auto needs a cache directory: neither BELLOWS_CACHE nor HOME is set",
                         "set BELLOWS_CACHE, or give --plan a file written by bellows plan");
  return cache / "plans" / (config_key + "-" + machine_key + ".json");
}

nlohmann::json TunedPlan::to_json() const {
  return {{"format", kTunedPlanFormat}, {"version", 1}, {"config", config_name}, {"config_key", config_key},
          {"machine", machine}, {"machine_key", machine_key}, {"mode", mode}, {"budget_s", budget_s}, {"seconds", seconds},
          {"trial_seconds", trial_seconds}, {"allow", allow}, {"overrides", overrides}, {"changes_numerics", changes_numerics},
          {"baseline_samples_per_s", baseline_samples_per_s}, {"samples_per_s", samples_per_s}, {"winner", winner},
          {"notes", notes}};
}

TunedPlan TunedPlan::from_json(const nlohmann::json& j, const std::string& origin) {
  const std::string hint = "write it with bellows plan CONFIG --out FILE";
  BELLOWS_CHECK_CONFIG(j.is_object() && j.value("format", "") == kTunedPlanFormat,
                       fmt::format("{} is not a tuned plan (no \"format\": \"{}\"; a run directory's plan.json records a run's plan, "
                                   "it is not one to apply)", origin, kTunedPlanFormat), hint);
  BELLOWS_CHECK_CONFIG(j.value("version", 0) == 1, fmt::format("{}: tuned plan version {} is not 1", origin, j.value("version", 0)), hint);
  TunedPlan p;
  try {
    p.config_name = j.value("config", "");
    p.config_key = j.value("config_key", "");
    p.machine = j.value("machine", "");
    p.machine_key = j.value("machine_key", "");
    p.mode = j.value("mode", "tune");
    p.budget_s = j.value("budget_s", 0.0);
    p.seconds = j.value("seconds", 0.0);
    p.trial_seconds = j.value("trial_seconds", 0.0);
    p.allow = j.value("allow", std::vector<std::string>{});
    p.overrides = j.at("overrides").get<std::vector<std::string>>();
    p.changes_numerics = j.value("changes_numerics", std::vector<std::string>{});
    p.baseline_samples_per_s = j.value("baseline_samples_per_s", 0.0);
    p.samples_per_s = j.value("samples_per_s", 0.0);
    p.winner = j.value("winner", "");
    p.notes = j.value("notes", std::vector<std::string>{});
    if (const auto trials = j.find("trials"); trials != j.end() && trials->is_array()) p.trial_count = trials->size();
  } catch (const nlohmann::json::exception& e) {
    throw Error(ErrorKind::kConfig, fmt::format("{}: malformed tuned plan: {}", origin, e.what()), hint);
  }
  for (const auto& o : p.overrides) {
    const auto eq = o.find('=');
    BELLOWS_CHECK_CONFIG(eq != std::string::npos && eq > 0, fmt::format("{}: override '{}' is not key=value", origin, o), hint);
  }
  return p;
}

TunedPlan read_tuned_plan(const fs::path& path) {
  std::ifstream in(path);
  BELLOWS_CHECK_CONFIG(in.good(), fmt::format("tuned plan {}: cannot open it", path.string()), "write it with bellows plan CONFIG --out FILE");
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(in);
  } catch (const nlohmann::json::parse_error& e) {
    throw Error(ErrorKind::kConfig, fmt::format("tuned plan {}: not JSON ({})", path.string(), e.what()), "write it with bellows plan CONFIG --out FILE");
  }
  return TunedPlan::from_json(j, path.string());
}

std::optional<std::string> take_plan_argument(std::vector<std::string>& args) {
  std::optional<std::string> value;
  std::vector<std::string> rest;
  for (std::size_t i = 0; i < args.size(); ++i) {
    if (args[i] == "--plan") {
      BELLOWS_CHECK_USAGE(i + 1 < args.size(), "--plan needs a value", "write --plan plan.json (from bellows plan) or --plan auto");
      value = args[++i];
    } else if (args[i].rfind("--plan=", 0) == 0) {
      value = args[i].substr(7);
    } else {
      rest.push_back(args[i]);
    }
  }
  BELLOWS_CHECK_USAGE(!value || !value->empty(), "--plan needs a value", "write --plan plan.json (from bellows plan) or --plan auto");
  args = std::move(rest);
  return value;
}

void set_plan_tuner(PlanTuner tuner) { plan_tuner() = std::move(tuner); }

config::Config apply_tuned_plan(config::Config loaded, const std::vector<std::string>& args, const std::string& value) {
  const config::Config without = resolve_loaded_config(loaded, args);  // the config the plan was tuned for, if it was
  const hw::HardwareInfo& hw = hw::HardwareInfo::get();
  const std::string config_key = tune_config_key(without), machine_key = tune_machine_key(hw);
  TunedPlan plan;
  fs::path file;
  std::string how;
  if (value == "auto") {
    file = cached_plan_path(config_key, machine_key);
    if (fs::exists(file)) {
      plan = read_tuned_plan(file);
      how = fmt::format("cached plan {} ({} on this machine)", file.string(), plan.mode == "grid" ? "grid" : "tuned");
    } else {
      BELLOWS_CHECK(static_cast<bool>(plan_tuner()), "--plan auto: no tuner is registered", "link the lab module (lab/tune.h)");
      plan = plan_tuner()(without, file);
      how = fmt::format("tuned now ({:.0f} s, {} trials), cached at {}", plan.seconds, plan.trial_count, file.string());
    }
  } else {
    file = value;
    plan = read_tuned_plan(file);
    how = "from " + file.string();
  }
  for (const auto& o : plan.overrides) {
    const auto eq = o.find('=');
    YAML::Node node;
    try {
      node = YAML::Load(o.substr(eq + 1));
    } catch (const YAML::Exception& e) {
      throw Error(ErrorKind::kConfig, fmt::format("tuned plan {}: the value of '{}' is not YAML ({})", file.string(), o, e.what()),
                  "write the plan again with bellows plan");
    }
    loaded.set(o.substr(0, eq), node, config::Origin::noted(fmt::format("tuned plan {} '{}'", file.string(), o)));
  }
  config::Config c = resolve_loaded_config(std::move(loaded), args);  // the command line's key=value win
  std::string reason = plan.overrides.empty()
                           ? fmt::format("{}: the configured settings were the fastest measured", how)
                           : fmt::format("{}: {} ({:.2f}x the configured, measured)", how, fmt::join(plan.overrides, " "),
                                         plan.baseline_samples_per_s > 0 ? plan.samples_per_s / plan.baseline_samples_per_s : 1.0);
  if (!plan.changes_numerics.empty()) reason += fmt::format("; changes the numerics: {} (plan.allow)", fmt::join(plan.changes_numerics, ", "));
  std::vector<std::string> overridden;
  for (const auto& o : plan.overrides) {
    if (on_command_line(c, key_of(o))) overridden.push_back(key_of(o));
  }
  if (!overridden.empty()) reason += fmt::format("; the command line's {} win", fmt::join(overridden, ", "));
  if (!plan.machine_key.empty() && plan.machine_key != machine_key) reason += fmt::format("; WARNING: tuned on another machine ({})", plan.machine);
  if (!plan.config_key.empty() && plan.config_key != config_key) reason += "; WARNING: tuned for another config (re-run bellows plan)";
  c.add_plan_note({"tuned", value == "auto" ? "auto" : "file", reason});
  return c;
}

}  // namespace bellows::app
