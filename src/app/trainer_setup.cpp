// The trainer's keys and options of a run; see trainer_setup.h. Each options struct is bound to its keys once
// (config/binding.h): the declarations below are the schema, the defaults and the reads.
#include "bellows/app/trainer_setup.h"

#include <fmt/format.h>

#include <algorithm>

#include "bellows/app/run_settings.h"  // defines: run_settings
#include "bellows/app/schema.h"        // defines: kDemoName
#include "bellows/config/binding.h"    // defines: Binding
#include "bellows/train/graph_step.h"  // defines: step_graph_conditions
#include "bellows/train/optimizer_registry.h"  // defines: optimizer_names, optimizer_state_tensors
#include "bellows/train/schedule_registry.h"   // defines: schedule_names
#include "bellows/util/check.h"

namespace bellows::app {
namespace {

using config::Binding;
using config::Type;

Binding<train::OptimizerOptions> optimizer_binding() {
  using O = train::OptimizerOptions;
  Binding<O> b("optim.");
  b.key("type", &O::type, "optimizer").choices(train::optimizer_names());  // the registered ones
  b.key("lr", &O::lr, "peak learning rate").min(0);
  b.custom("betas", Type::kDoubleList, "Adam betas", [](const config::Config& c, const std::string& key, O& o) {
     const auto betas = config::get_double_list(c, key);
     BELLOWS_CHECK_CONFIG(betas.size() == 2, fmt::format("{} has {} values, expected 2 ({})", key, betas.size(), c.origin(key).str()),
                          "write optim.betas: [0.9, 0.999]");
     o.beta1 = betas[0];
     o.beta2 = betas[1];
   }).min(0).max(0.999999).default_value(YAML::Load(fmt::format("[{}, {}]", O{}.beta1, O{}.beta2)));
  b.key("eps", &O::eps, "Adam epsilon").min(0);
  b.key("weight_decay", &O::weight_decay, "weight decay (not applied to biases and norms)").min(0);
  b.key("momentum", &O::momentum, "SGD momentum").min(0);
  b.key("nesterov", &O::nesterov, "SGD Nesterov momentum");
  b.key("dampening", &O::dampening, "SGD dampening").min(0).max(1);
  b.key("implementation", &O::implementation, "kernel choice").choices({"auto", "fused", "foreach"});
  b.key("no_decay", &O::no_decay_patterns, "name substrings exempt from weight decay");
  return b;
}

Binding<train::ScheduleOptions> schedule_binding() {
  using S = train::ScheduleOptions;
  Binding<S> b("schedule.");
  // A config's run keeps its rate unless it names a schedule (the struct's cosine is for C++ callers that set total_steps).
  b.key("type", &S::type, "LR schedule after warmup").choices(train::schedule_names()).default_value(YAML::Node("constant"));
  b.key("warmup_steps", &S::warmup_steps, "linear warmup steps").min(0);
  b.key("warmup_start_factor", &S::warmup_start_factor, "warmup starts at this fraction of lr").min(0).max(1);
  b.key("total_steps", &S::total_steps, "cosine/linear: decay length (0: the whole run)").min(0);
  b.key("min_lr_factor", &S::min_lr_factor, "final lr as a fraction of lr").min(0).max(1);
  b.key("step_size", &S::step_size, "step: steps between decays").min(1);
  b.key("gamma", &S::gamma, "step: decay factor").min(1e-12).max(1);
  b.key("factor", &S::factor, "plateau: decay factor").min(0).max(0.999999);
  b.key("mode", &S::mode, "plateau: whether the monitored metric should fall or rise (auto: the task says)")
      .choices({"auto", "min", "max"}).default_value(YAML::Node("auto"));
  b.key("patience", &S::patience, "plateau: evaluations without improvement").min(0);
  b.key("threshold", &S::threshold, "plateau: relative improvement that counts").min(0);
  return b;
}

Binding<precision::GradScalerOptions> scaler_binding() {
  using G = precision::GradScalerOptions;
  Binding<G> b("scaler.");
  b.key("init_scale", &G::init_scale, "initial loss scale").min(1);
  b.key("growth_factor", &G::growth_factor, "scale growth").min(1);
  b.key("backoff_factor", &G::backoff_factor, "scale backoff on inf/NaN").min(1e-6).max(1);
  b.key("growth_interval", &G::growth_interval, "clean steps before growth").min(1);
  return b;
}

// The trainer's keys: train.* (minus what the data and the plan read), optim.*, schedule.*, scaler.*, ema.*.
const Binding<train::TrainerOptions>& trainer_binding() {
  using T = train::TrainerOptions;
  return config::bound<T>("", [](config::Binding<T>& b) {
    b.key("train.epochs", &T::epochs, "passes over the training data").min(1);
    b.key("train.max_steps", &T::max_steps, "stop after this many optimizer steps (0: no limit)").min(0);
    b.key("train.accumulation_steps", &T::accumulation_steps, "micro-batches per optimizer step").min(1);
    b.key("train.clip_max_norm", &T::clip_max_norm, "clip the global gradient L2 norm (0: off)").min(0);
    b.key("train.clip_value", &T::clip_value, "clamp gradient elements to [-v, v] (0: off)").min(0);
    b.key("train.log_every_n_steps", &T::log_every_n_steps, "optimizer steps between logged records").min(1);
    b.key("train.eval_every_n_steps", &T::eval_every_n_steps, "optimizer steps between evaluations (0: each epoch end)").min(0);
    b.key("train.on_nonfinite", &T::on_nonfinite, train::on_nonfinite_names(),
          "a step with NaN/Inf gradients is skipped and named (step, first parameter); then stop the run (exit 3) or skip on; "
          "auto: stop, except under fp16-mixed, whose loss scaler skips such steps by design");
    b.key("train.detect_anomaly", &T::detect_anomaly, "stop at the first NaN/Inf with the step, phase and tensor that held it (each step "
          "waits for the device; slower backward)");
    b.custom("train.oom_recovery", Type::kString, "an out-of-memory error in a step halves the micro-batch, doubles the micro-batches per "
             "optimizer step and runs the step again (same samples, same effective batch); auto: with one process (with several every "
             "step waits for the ranks to agree: 20% slower measured on the demo), true: also with several, false: stop with exit 4",
             [](const config::Config& c, const std::string& key, T& o) {
               const std::string v = config::get_string(c, key);
               o.oom_recovery = v != "false";
               o.oom_recovery_with_ranks = v == "true";
             }).choices({"auto", "true", "false"}).default_value(YAML::Node("auto"));
    b.key("train.freeze", &T::freeze, "parameter name globs to freeze");
    b.nest(&T::optimizer, optimizer_binding());
    b.nest(&T::schedule, schedule_binding());
    // EMA: an optional of the trainer's; its keys are read into it when ema.enabled (they come after it).
    b.custom("ema.enabled", Type::kBool, "keep an exponential moving average of the weights", [](const config::Config& c, const std::string& key, T& o) {
       if (config::get_bool(c, key)) o.ema = train::EmaOptions{};
     }).default_value(YAML::Node(false));
    const train::EmaOptions ema;
    b.custom("ema.decay", Type::kDouble, "EMA decay", [](const config::Config& c, const std::string& key, T& o) {
       if (o.ema) o.ema->decay = config::get_double(c, key);
     }).min(0).max(1).default_value(YAML::Node(ema.decay));
    b.custom("ema.every_n_steps", Type::kInt, "optimizer steps between EMA updates", [](const config::Config& c, const std::string& key, T& o) {
       if (o.ema) o.ema->every_n_steps = config::get_int(c, key);
     }).min(1).default_value(YAML::Node(ema.every_n_steps));
    b.custom("ema.start_step", Type::kInt, "first optimizer step averaged", [](const config::Config& c, const std::string& key, T& o) {
       if (o.ema) o.ema->start_step = config::get_int(c, key);
     }).min(0).default_value(YAML::Node(ema.start_step));
    b.custom("ema.eval", Type::kBool, "evaluate with the EMA weights", [](const config::Config& c, const std::string& key, T& o) {
       o.eval_with_ema = config::get_bool(c, key);
       BELLOWS_CHECK_CONFIG(o.ema || !o.eval_with_ema, fmt::format("ema.eval is true but ema.enabled is false ({})", c.origin(key).str()),
                            "set ema.enabled: true, or drop ema.eval");
     }).default_value(YAML::Node(false));
    b.nest(&T::scaler, scaler_binding());
  });
}

const Binding<train::CheckpointOptions>& checkpoint_options_binding() {
  using C = train::CheckpointOptions;
  return config::bound<C>("checkpoint.", [](config::Binding<C>& b) {
    b.key("every_n_steps", &C::every_n_steps, "optimizer steps between checkpoints (0: not by steps)").min(0);
    b.key("every_n_minutes", &C::every_n_minutes, "minutes between checkpoints (0: not by time)").min(0);
    b.key("keep_last", &C::keep_last, "checkpoints kept (0: all)").min(0);
    b.key("keep_best", &C::keep_best, "also keep the one with the best monitored metric");
    b.key("at_end", &C::at_end, "write one when the run finishes");
  });
}

// checkpoint.enabled (the directory: checkpoint_options) and checkpoint.layout (resolved with the strategy:
// checkpoint_layout_entry) beside train::CheckpointOptions' keys.
const Binding<CheckpointSettings>& checkpoint_binding() {
  using C = CheckpointSettings;
  return config::bound<C>("checkpoint.", [](config::Binding<C>& b) {
    b.key("enabled", &C::enabled, "write checkpoints into <run dir>/checkpoints");
    b.key("layout", &C::layout,
          "whole: rank 0 writes every tensor; sharded: every rank writes what it holds, rank 0 a manifest of the parts; "
          "auto: sharded under zero1, zero2 and fsdp (the strategy's), whole otherwise")
        .choices({"auto", "whole", "sharded"});
    b.nest(&C::options, checkpoint_options_binding());
  });
}

// profile.window "N-M" (--profile N-M): optimizer steps N to M, counted from 1, traced.
void read_profile_window(const config::Config& c, const std::string& key, obs::ProfileOptions& po) {
  const std::string window = config::get_string(c, key);
  if (window.empty()) return;
  const auto dash = window.find('-');
  std::int64_t first = 0, last = 0;
  bool ok = dash != std::string::npos;
  try {
    std::size_t used = 0;
    if (ok) first = std::stoll(window.substr(0, dash), &used), ok = used == dash;
    if (ok) last = std::stoll(window.substr(dash + 1), &used), ok = used == window.size() - dash - 1;
  } catch (const std::exception&) {
    ok = false;
  }
  BELLOWS_CHECK_CONFIG(ok && first >= 1 && last >= first,
                       fmt::format("{} is '{}' ({}), expected N-M with 1 <= N <= M", key, window, c.origin(key).str()),
                       "give the optimizer steps to trace, counted from 1: --profile 5-7");
  po.enabled = true;
  po.start_step = first - 1;
  po.steps = last - first + 1;
}

const Binding<obs::ProfileOptions>& profile_binding() {
  using P = obs::ProfileOptions;
  return config::bound<P>("profile.", [](config::Binding<P>& b) {
    b.key("enabled", &P::enabled, "write a Chrome trace of some training steps to <run dir>/trace.json");
    b.key("start_step", &P::start_step, "optimizer steps before the trace starts (skip warm-up)").min(0);
    b.key("steps", &P::steps, "optimizer steps traced").min(1);
    b.custom("window", Type::kString, "N-M: trace optimizer steps N to M (from 1); sets profile.enabled, start_step and steps",
             read_profile_window).default_value(YAML::Node(""));  // after enabled, start_step and steps: it sets them
    b.key("record_shapes", &P::record_shapes, "record operator input shapes");
    b.key("memory", &P::profile_memory, "record tensor allocations");
  });
}

}  // namespace

void add_trainer_keys(config::Schema& s) {
  trainer_binding().declare(s);
  checkpoint_binding().declare(s);
  profile_binding().declare(s);
}

train::TrainerOptions trainer_options(const config::Config& c, const plan::Plan& p) {
  train::TrainerOptions o = trainer_binding().read(c);
  // train.max_steps without train.epochs trains to max_steps (Lightning's rule), not to the end of the default epoch.
  // The embedded demo's epochs are no choice of the user's either.
  if (o.max_steps > 0 && (c.is_schema_default("train.epochs") || c.origin("train.epochs").file == kDemoName))
    o.epochs = 0;
  o.device = p.device;
  o.precision = p.precision;
  o.channels_last = p.channels_last;
  o.non_blocking = p.pin_memory;
  return o;
}

plan::PlanEntry length_entry(const train::TrainerOptions& o, std::int64_t batches_per_epoch) {
  const std::int64_t k = o.accumulation_steps;
  const std::int64_t steps_per_epoch = std::max<std::int64_t>(1, (batches_per_epoch + k - 1) / k);
  const std::string per_epoch = fmt::format("{} optimizer step(s) per epoch ({} batches{})", steps_per_epoch, batches_per_epoch,
                                            k > 1 ? fmt::format(", {} per step", k) : "");
  if (o.epochs == 0) {
    return {"length", fmt::format("{} steps", o.max_steps),
            fmt::format("train.max_steps {} ends the run (train.epochs not set in the config: as many epochs as it takes, {}); {}", o.max_steps,
                        (o.max_steps + steps_per_epoch - 1) / steps_per_epoch, per_epoch)};
  }
  const std::int64_t by_epochs = steps_per_epoch * o.epochs;
  if (o.max_steps > 0 && o.max_steps < by_epochs) {
    return {"length", fmt::format("{} steps", o.max_steps),
            fmt::format("train.max_steps {} ends the run before train.epochs {} would ({} steps); {}", o.max_steps, o.epochs, by_epochs, per_epoch)};
  }
  return {"length", fmt::format("{} steps", by_epochs),
          fmt::format("train.epochs {} ends the run{}; {}", o.epochs,
                      o.max_steps > 0 ? fmt::format(" before train.max_steps {} would", o.max_steps) : std::string(), per_epoch)};
}

plan::PlanEntry resolve_compile(const RunSettings& run, train::TrainerOptions& o, std::int64_t world_size) {
  const std::string& asked = run.compile;
  if (asked == "off") {
    o.compile = train::Compile::kOff;
    return {"compile", "off", "steps run eagerly (compile: auto or cuda_graph captures whole steps as CUDA graphs)"};
  }
  // train.oom_recovery as the binding stored it (nothing before this changes it): true sets both flags, auto the first.
  const bool recovery_asked = o.oom_recovery_with_ranks, recovery_auto = o.oom_recovery && !o.oom_recovery_with_ranks;
  const std::vector<std::string>& checkpointing = run.checkpointing;
  train::StepGraphConditions g = train::step_graph_conditions(o, world_size);
  g.oom_recovery = recovery_asked;  // auto is turned off below when the steps are captured
  g.activation_checkpointing = !checkpointing.empty() && !(checkpointing.size() == 1 && checkpointing[0] == "auto");
  const std::string why = train::step_graph_unfit(g);
  if (!why.empty()) {
    // Asked for by name, the trainer says again why it trains eagerly; auto just does.
    o.compile = asked == "cuda_graph" ? train::Compile::kCudaGraph : train::Compile::kOff;
    return {"compile", "off", fmt::format("{}: {}", asked == "auto" ? "auto" : "cuda_graph cannot be used", why)};
  }
  if (recovery_auto) o.oom_recovery = false;
  const std::string recovery_off = recovery_auto ? "; out-of-memory recovery off (a captured step's memory is fixed)" : "";
  if (asked == "auto") {
    o.compile = train::Compile::kAuto;
    return {"compile", "auto",
            fmt::format("measured: after {} warm-up steps a whole step is captured as a CUDA graph, {} replays are timed against {} eager "
                        "steps and the faster way trains on (a message says which, with both times and the graph's memory){}",
                        train::kStepGraphWarmup, train::kStepGraphTrialSteps, train::kStepGraphTrialSteps, recovery_off)};
  }
  o.compile = train::Compile::kCudaGraph;
  return {"compile", "cuda_graph",
          fmt::format("whole steps as CUDA graphs after {} warm-up steps (no host sync in a step; a batch of other shapes runs eagerly){}",
                      train::kStepGraphWarmup, recovery_off)};
}

models::DropoutMasks dropout_masks_setting(const config::Config& c) {
  return run_settings(c).dropout_masks == "torch" ? models::DropoutMasks::kTorch : models::DropoutMasks::kParallel;
}

train::CheckpointOptions checkpoint_options(const config::Config& c, const std::filesystem::path& dir) {
  const CheckpointSettings settings = checkpoint_settings(c);
  if (!settings.enabled) return {};
  train::CheckpointOptions co = settings.options;
  co.dir = dir / "checkpoints";
  return co;
}

train::TrainerOptions trainer_settings(const config::Config& c) { return trainer_binding().read(c); }

CheckpointSettings checkpoint_settings(const config::Config& c) { return checkpoint_binding().read(c); }

int optimizer_states(const config::Config& c) { return train::optimizer_state_tensors(optimizer_binding().read(c)); }

plan::PlanEntry checkpoint_layout_entry(const config::Config& c, const dist::StrategyEntry& strategy, train::CheckpointOptions& co) {
  const CheckpointSettings settings = checkpoint_settings(c);
  const std::string& asked = settings.layout;
  const std::string layout = asked == "auto" ? strategy.checkpoint_layout : asked;
  co.layout = layout == "sharded" ? train::CheckpointOptions::Layout::kSharded : train::CheckpointOptions::Layout::kWhole;
  std::string why;
  if (!settings.enabled) why = "checkpoint.enabled: false; a checkpoint asked for is written so";
  else if (asked != "auto") why = fmt::format("checkpoint.layout ({})", c.origin("checkpoint.layout").str());
  else if (layout == "sharded") why = fmt::format("auto: under {} each rank holds a share of the training state and writes it; rank 0 writes "
                                                  "the manifest", strategy.name);
  else if (!strategy.several_processes) why = "auto: one process holds every tensor and writes them";
  else why = fmt::format("auto: under {} every rank holds every tensor; rank 0 writes them", strategy.name);
  return {"ckpt_layout", layout, why};
}

obs::ProfileOptions profile_options(const config::Config& c, const std::filesystem::path& dir) {
  obs::ProfileOptions po = profile_binding().read(c);
  po.path = dir / "trace.json";
  return po;
}

}  // namespace bellows::app
