// The run's own keys bound to RunSettings, and the run directory they name; see run_settings.h.
#include "bellows/app/run_settings.h"

#include <fmt/format.h>

#include <optional>
#include <utility>

#include "bellows/ckpt/checkpoint.h"  // defines: find_latest_valid
#include "bellows/config/binding.h"  // defines: Binding, bound
#include "bellows/dist/registry.h"
#include "bellows/obs/sink_registry.h"
#include "bellows/util/check.h"

namespace bellows::app {
namespace fs = std::filesystem;

namespace {

using config::Type;
using S = RunSettings;

void bind_identity_and_execution(config::Binding<S>& b) {
  b.key("name", &S::name, "run name; outputs go to <output_dir>/<name>");
  // An output path follows the rule of every path (config/paths.h): `output_dir: runs` in a file is beside the file.
  b.key("output_dir", &S::output_dir,
        "directory that holds run directories (relative to the config file; the default and the command line's: to the "
        "working directory)")
      .file_path();
  b.key("seed", &S::seed, "seed for weights, data order and dropout").min(0);
  b.key("dropout_masks", &S::dropout_masks, "dropout masks: parallel (Philox, filled in parallel on the CPU) or torch (at::dropout's draws, as PyTorch)")
      .choices({"parallel", "torch"});
  // auto by default: on CUDA the captured step is measured against eager steps and kept only where it is faster; on the
  // CPU (and wherever a run cannot be captured) steps run eagerly.
  b.key("compile", &S::compile, "whole training steps as CUDA graphs: auto (on CUDA, where the run allows it: captured, timed against "
        "eager steps, the faster kept), cuda_graph (always, where allowed), or off")
      .choices({"auto", "cuda_graph", "off"});
  std::vector<std::string> strategies = {"auto"};
  for (const auto& name : dist::strategy_names()) strategies.push_back(name);  // the registered strategies (dist/registry.h)
  b.key("dist.strategy", &S::strategy, "how replicas meet: auto (one process: single; several started by a launcher: ddp where each "
        "rank's memory allows, else zero2, else fsdp), or a registered strategy").choices(strategies);
}

void bind_batch_limits_and_memory(config::Binding<S>& b) {
  b.key("train.global_batch_size", &S::global_batch_size, "samples per optimizer step over all ranks (0: data.batch_size x accumulation x ranks); "
        "required by data.batch_size: auto, checked against them otherwise").min(0);
  b.key("cpu_tensor_limit_mb", &S::cpu_tensor_limit_mb, "CPU tensor allocations past this many MB fail as out of memory (0: no limit): emulate a "
        "smaller machine, or test out-of-memory handling").min(0);
  b.key("gpu_memory_limit_mb", &S::gpu_memory_limit_mb, "the CUDA caching allocator's limit in MB (0: none; PyTorch's set_per_process_memory_fraction): "
        "share a GPU, emulate a smaller one, or test out-of-memory handling on a device").min(0);
  b.key("checkpoint.strict", &S::checkpoint_strict, "resume: every model tensor must match (false: load what matches)");
  b.key("init_weights", &S::init_weights, "safetensors file of pretrained weights loaded before training (by tensor name)").file_path();
  b.key("init_weights_strict", &S::init_weights_strict, "init_weights: every model tensor must be in the file (false: load what matches)");
  b.key("checkpointing", &S::checkpointing,
        "activation checkpointing: block name patterns (e.g. encoder.layers.*), or auto (the plan decides from a measured step)");
  b.key("plan.allow", &S::plan_allow,
        "what `bellows plan` may change that changes the numerics: precision, batch_size (micro-batch x accumulation at the "
        "same samples per step)");
  b.key("memory_budget_gib", &S::memory_budget_gib, "memory a training step may use (0: the device's available memory); checkpointing: auto").min(0);
}

// The registered sinks' switches, FLOP counting, what online training logs where, resume and the model.
void bind_logging_resume_and_model(config::Binding<S>& b) {
  for (const auto& sink : obs::sink_entries()) {  // the switches of the registered sinks (obs/sink_registry.h)
    if (sink.key.empty()) continue;
    b.custom(sink.key, Type::kBool, sink.help, [](const config::Config& c, const std::string& key, S& o) { o.sinks[key] = config::get_bool(c, key); })
        .default_value(YAML::Node(sink.on_by_default));
  }
  b.key("log.flops", &S::log_flops, "count a training step's FLOPs from its ops' shapes and report achieved GFLOP/s and MFU "
        "against the cached measured matmul peak (measured once per machine)");
  b.key("online.console", &S::online_console, "online training (app/online.h, the C API): where the training log goes")
      .choices({"stdout", "stderr", "none"});
  b.key("online.log", &S::online_log, "online training: what the console shows: sessions (the header, one line a session and "
        "warnings) or epochs (also every step's line, each epoch and evaluation, as `bellows train`)")
      .choices({"sessions", "epochs"});
  b.key("resume", &S::resume, "auto (the newest valid checkpoint of the newest run of this name, <name> or <name>-N, if "
        "any) or a checkpoint path")
      .file_path([](const config::Config&, const std::string& value) {
        return value == "auto" ? std::size_t{0} : value.size();  // auto names no file
      });
  b.key("model.name", &S::model_name, "registered model");
}

const config::Binding<S>& run_settings_binding() {
  return config::bound<S>("", [](config::Binding<S>& b) {
    bind_identity_and_execution(b);
    bind_batch_limits_and_memory(b);
    bind_logging_resume_and_model(b);
  });
}

}  // namespace

bool RunSettings::sink_on(const std::string& key) const {
  if (key.empty()) return true;
  const auto it = sinks.find(key);
  return it == sinks.end() || it->second;
}

void add_run_setting_keys(config::Schema& schema) { run_settings_binding().declare(schema); }

RunSettings run_settings(const config::Config& config) { return run_settings_binding().read(config); }

namespace {

// resume: auto continues the newest run of the name: of <name>, <name>-2, <name>-3, ... (a fresh run is written to the
// first free one) the directory whose newest valid checkpoint was written last; <name> when none has one.
fs::path run_to_continue(const fs::path& base) {
  std::vector<fs::path> runs{base};
  const std::string prefix = base.filename().string() + "-";
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(base.parent_path().empty() ? fs::path(".") : base.parent_path(), ec)) {
    const std::string name = entry.path().filename().string();
    if (name.size() > prefix.size() && name.starts_with(prefix) &&
        name.find_first_not_of("0123456789", prefix.size()) == std::string::npos && entry.is_directory()) {
      runs.push_back(entry.path());
    }
  }
  if (runs.size() == 1) return base;  // nothing to choose: checkpoint_to_resume verifies its checkpoints once, not twice
  std::optional<std::pair<fs::file_time_type, fs::path>> newest;
  for (const fs::path& run : runs) {
    if (!fs::is_directory(run / "checkpoints", ec)) continue;
    const std::optional<fs::path> latest = ckpt::find_latest_valid(run / "checkpoints");
    if (!latest) continue;
    const fs::file_time_type written = fs::last_write_time(*latest, ec);
    if (!ec && (!newest || written > newest->first)) newest = {written, run};
  }
  return newest ? newest->second : base;
}

}  // namespace

fs::path make_run_dir(const RunSettings& run) {
  const fs::path base = fs::path(run.output_dir) / run.name;
  const std::string& resume = run.resume;
  fs::path dir = resume == "auto" ? run_to_continue(base) : base;
  for (int i = 2; resume.empty() && fs::exists(dir) && !fs::is_empty(dir); ++i) dir = base.string() + "-" + std::to_string(i);
  std::error_code ec;
  fs::create_directories(dir, ec);
  BELLOWS_CHECK_RESOURCE(!ec, fmt::format("cannot create run directory {}: {}", dir.string(), ec.message()),
                         "check output_dir and its permissions");
  return dir;
}

}  // namespace bellows::app
