// The run config's schema and loading; see schema.h.
#include "bellows/app/schema.h"

#include "bellows/app/data_setup.h"
#include "bellows/app/profiles.h"
#include "bellows/app/tune.h"
#include "bellows/hw/hardware_info.h"
#include "bellows/data/build.h"
#include "bellows/models/registry.h"
#include "bellows/precision/precision.h"

namespace bellows::app {
namespace fs = std::filesystem;
using config::Type;

const char* const kDemoConfig = R"(# bellows' embedded default: an MLP learns a synthetic regression task
# (a fixed random teacher network plus noise); a few seconds on 2 cores.
name: demo
seed: 0
data:
  source: synthetic
  kind: regression
  samples: 65536
  features: 64
  batch_size: 256
  val_fraction: 0.1
model:
  name: mlp
  in_features: 64
  hidden: [256, 256]
  out_features: 1
train:
  epochs: 3
  log_every_n_steps: 50
optim:
  type: adamw
  lr: 0.002
  weight_decay: 0.01
schedule:
  type: cosine
  warmup_steps: 50
)";

config::Schema run_schema(const std::string& model_name) {
  config::Schema s;
  auto node = [](auto v) { return YAML::Node(v); };
  s.add("name", Type::kString, "run name; outputs go to <output_dir>/<name>").default_value(node("run"));
  s.add("output_dir", Type::kString, "directory that holds run directories").default_value(node("runs"));
  s.add("seed", Type::kInt, "seed for weights, data order and dropout").min(0).default_value(node(0));
  // plan
  s.add("device", Type::kString, "auto | cpu | cuda | cuda:N").default_value(node("auto"));
  std::vector<std::string> precisions = {"auto"};
  for (const auto& p : precision::precision_names()) precisions.push_back(p);
  s.add("precision", Type::kString, "numeric precision policy").choices(precisions).default_value(node("auto"));
  s.add("threads", Type::kInt, "intra-op CPU threads (0: one per usable core)").min(0).default_value(node(0));
  s.add("deterministic", Type::kBool, "deterministic algorithms and cuDNN; bitwise-reproducible runs").default_value(node(false));
  s.add("cudnn_benchmark", Type::kString, "let cuDNN time its algorithms").choices({"auto", "true", "false"}).default_value(node("auto"));
  s.add("dropout_masks", Type::kString, "dropout masks: parallel (Philox, filled in parallel on the CPU) or torch (at::dropout's draws, as PyTorch)")
      .choices({"parallel", "torch"}).default_value(node("parallel"));
  s.add("cpu_allocator", Type::kString, "freed CPU memory: auto/retain (kept for the next step), system (glibc's trimming)")
      .choices({"auto", "retain", "system"}).default_value(node("auto"));
  s.add("channels_last", Type::kBool, "NHWC memory format for 4-D tensors (convolutional models)").default_value(node(false));
  // Off by default until a GPU run has been recorded (docs/gpu.md): the captured step has only run on the CPU twin.
  s.add("compile", Type::kString, "whole training steps as CUDA graphs: auto (where the run allows it), cuda_graph, or off")
      .choices({"auto", "cuda_graph", "off"}).default_value(node("off"));
  // dist: data parallel over c10d when a launcher started several processes (bellows launch, torchrun, srun, mpirun)
  s.add("dist.strategy", Type::kString, "auto (ddp when the environment names several processes), single or ddp")
      .choices({"auto", "single", "ddp"}).default_value(node("auto"));
  s.add("dist.backend", Type::kString, "c10d backend: auto (nccl on CUDA, gloo on the CPU), gloo or nccl")
      .choices({"auto", "gloo", "nccl"}).default_value(node("auto"));
  s.add("dist.bucket_mb", Type::kDouble, "gradient all-reduce bucket size, MiB").min(0.001).default_value(node(25.0));
  s.add("dist.broadcast_buffers", Type::kBool, "rank 0's buffers (BatchNorm statistics) to every rank before each step and evaluation")
      .default_value(node(true));
  s.add("dist.timeout_s", Type::kDouble, "longest wait for the other ranks (rendezvous, every collective) before failing")
      .min(1).default_value(node(300.0));
  // train
  s.add("train.epochs", Type::kInt, "passes over the training data").min(1).default_value(node(1));
  s.add("train.max_steps", Type::kInt, "stop after this many optimizer steps (0: no limit)").min(0).default_value(node(0));
  s.add("train.accumulation_steps", Type::kInt, "micro-batches per optimizer step").min(1).default_value(node(1));
  s.add("train.global_batch_size", Type::kInt, "samples per optimizer step over all ranks (0: data.batch_size x accumulation x ranks); "
        "required by data.batch_size: auto, checked against them otherwise").min(0).default_value(node(0));
  s.add("train.clip_max_norm", Type::kDouble, "clip the global gradient L2 norm (0: off)").min(0).default_value(node(0.0));
  s.add("train.clip_value", Type::kDouble, "clamp gradient elements to [-v, v] (0: off)").min(0).default_value(node(0.0));
  s.add("train.log_every_n_steps", Type::kInt, "optimizer steps between logged records").min(1).default_value(node(10));
  s.add("train.eval_every_n_steps", Type::kInt, "optimizer steps between evaluations (0: each epoch end)").min(0).default_value(node(0));
  s.add("cpu_tensor_limit_mb", Type::kDouble, "CPU tensor allocations past this many MB fail as out of memory (0: no limit): emulate a "
        "smaller machine, or test out-of-memory handling").min(0).default_value(node(0.0));
  s.add("train.on_nonfinite", Type::kString, "a step with NaN/Inf gradients is skipped and named (step, first parameter); then "
        "stop the run (exit 3) or skip on; auto: stop, except under fp16-mixed, whose loss scaler skips such steps by design")
      .choices({"auto", "stop", "skip"})
      .default_value(node("auto"));
  s.add("train.detect_anomaly", Type::kBool, "stop at the first NaN/Inf with the step, phase and tensor that held it (each step "
        "waits for the device; slower backward)").default_value(node(false));
  s.add("train.oom_recovery", Type::kString, "an out-of-memory error in a step halves the micro-batch, doubles the micro-batches per "
        "optimizer step and runs the step again (same samples, same effective batch); auto: with one process (with several every "
        "step waits for the ranks to agree: 20% slower measured on the demo), true: also with several, false: stop with exit 4")
      .choices({"auto", "true", "false"}).default_value(node("auto"));
  s.add("train.freeze", Type::kStringList, "parameter name globs to freeze").default_value(YAML::Load("[]"));
  // optimizer
  s.add("optim.type", Type::kString, "optimizer").choices({"adamw", "adam", "sgd"}).default_value(node("adamw"));
  s.add("optim.lr", Type::kDouble, "peak learning rate").min(0).default_value(node(1e-3));
  s.add("optim.betas", Type::kDoubleList, "Adam betas").min(0).max(0.999999).default_value(YAML::Load("[0.9, 0.999]"));
  s.add("optim.eps", Type::kDouble, "Adam epsilon").min(0).default_value(node(1e-8));
  s.add("optim.weight_decay", Type::kDouble, "weight decay (not applied to biases and norms)").min(0).default_value(node(0.01));
  s.add("optim.momentum", Type::kDouble, "SGD momentum").min(0).default_value(node(0.0));
  s.add("optim.nesterov", Type::kBool, "SGD Nesterov momentum").default_value(node(false));
  s.add("optim.dampening", Type::kDouble, "SGD dampening").min(0).max(1).default_value(node(0.0));
  s.add("optim.implementation", Type::kString, "kernel choice").choices({"auto", "fused", "foreach"}).default_value(node("auto"));
  s.add("optim.no_decay", Type::kStringList, "name substrings exempt from weight decay").default_value(YAML::Load("[bias, norm, bn, ln]"));
  // schedule
  s.add("schedule.type", Type::kString, "LR schedule after warmup")
      .choices({"cosine", "linear", "step", "constant", "plateau"}).default_value(node("constant"));
  s.add("schedule.warmup_steps", Type::kInt, "linear warmup steps").min(0).default_value(node(0));
  s.add("schedule.warmup_start_factor", Type::kDouble, "warmup starts at this fraction of lr").min(0).max(1).default_value(node(0.0));
  s.add("schedule.total_steps", Type::kInt, "cosine/linear: decay length (0: the whole run)").min(0).default_value(node(0));
  s.add("schedule.min_lr_factor", Type::kDouble, "final lr as a fraction of lr").min(0).max(1).default_value(node(0.0));
  s.add("schedule.step_size", Type::kInt, "step: steps between decays").min(1).default_value(node(1000));
  s.add("schedule.gamma", Type::kDouble, "step: decay factor").min(1e-12).max(1).default_value(node(0.1));
  s.add("schedule.factor", Type::kDouble, "plateau: decay factor").min(0).max(0.999999).default_value(node(0.1));
  s.add("schedule.mode", Type::kString, "plateau: whether the monitored metric should fall or rise (auto: the task says)")
      .choices({"auto", "min", "max"}).default_value(node("auto"));
  s.add("schedule.patience", Type::kInt, "plateau: evaluations without improvement").min(0).default_value(node(10));
  s.add("schedule.threshold", Type::kDouble, "plateau: relative improvement that counts").min(0).default_value(node(1e-4));
  // ema
  s.add("ema.enabled", Type::kBool, "keep an exponential moving average of the weights").default_value(node(false));
  s.add("ema.decay", Type::kDouble, "EMA decay").min(0).max(1).default_value(node(0.999));
  s.add("ema.every_n_steps", Type::kInt, "optimizer steps between EMA updates").min(1).default_value(node(1));
  s.add("ema.start_step", Type::kInt, "first optimizer step averaged").min(0).default_value(node(0));
  s.add("ema.eval", Type::kBool, "evaluate with the EMA weights").default_value(node(false));
  // loss scaling (fp16-mixed)
  s.add("scaler.init_scale", Type::kDouble, "initial loss scale").min(1).default_value(node(65536.0));
  s.add("scaler.growth_factor", Type::kDouble, "scale growth").min(1).default_value(node(2.0));
  s.add("scaler.backoff_factor", Type::kDouble, "scale backoff on inf/NaN").min(1e-6).max(1).default_value(node(0.5));
  s.add("scaler.growth_interval", Type::kInt, "clean steps before growth").min(1).default_value(node(2000));
  add_loader_keys(s);
  data::add_dataset_keys(s);
  // checkpoints
  s.add("checkpoint.enabled", Type::kBool, "write checkpoints into <run dir>/checkpoints").default_value(node(true));
  s.add("checkpoint.every_n_steps", Type::kInt, "optimizer steps between checkpoints (0: not by steps)").min(0).default_value(node(0));
  s.add("checkpoint.every_n_minutes", Type::kDouble, "minutes between checkpoints (0: not by time)").min(0).default_value(node(0.0));
  s.add("checkpoint.keep_last", Type::kInt, "checkpoints kept (0: all)").min(0).default_value(node(3));
  s.add("checkpoint.keep_best", Type::kBool, "also keep the one with the best monitored metric").default_value(node(true));
  s.add("checkpoint.at_end", Type::kBool, "write one when the run finishes").default_value(node(true));
  s.add("checkpoint.strict", Type::kBool, "resume: every model tensor must match (false: load what matches)").default_value(node(true));
  s.add("init_weights", Type::kString, "safetensors file of pretrained weights loaded before training (by tensor name)").default_value(node(""));
  s.add("init_weights_strict", Type::kBool, "init_weights: every model tensor must be in the file (false: load what matches)").default_value(node(true));
  // profiler trace
  s.add("profile.enabled", Type::kBool, "write a Chrome trace of some training steps to <run dir>/trace.json").default_value(node(false));
  s.add("profile.start_step", Type::kInt, "optimizer steps before the trace starts (skip warm-up)").min(0).default_value(node(5));
  s.add("profile.steps", Type::kInt, "optimizer steps traced").min(1).default_value(node(3));
  s.add("profile.window", Type::kString, "N-M: trace optimizer steps N to M (from 1); sets profile.enabled, start_step and steps")
      .default_value(node(""));
  s.add("profile.record_shapes", Type::kBool, "record operator input shapes").default_value(node(true));
  s.add("profile.memory", Type::kBool, "record tensor allocations").default_value(node(false));
  s.add("checkpointing", Type::kStringList,
        "activation checkpointing: block name patterns (e.g. encoder.layers.*), or auto (the plan decides from a measured step)")
      .default_value(YAML::Load("[]"));
  s.add("plan.allow", Type::kStringList,
        "what `bellows plan` may change that changes the numerics: precision, batch_size (micro-batch x accumulation at the "
        "same samples per step)").default_value(YAML::Load("[]"));
  s.add("memory_budget_gib", Type::kDouble, "memory a training step may use (0: the device's available memory); checkpointing: auto")
      .min(0).default_value(node(0.0));
  s.add("log.tensorboard", Type::kBool, "write TensorBoard event files (events.out.tfevents.*) into the run directory")
      .default_value(node(true));
  s.add("log.flops", Type::kBool, "count a training step's FLOPs from its ops' shapes and report achieved GFLOP/s and MFU "
        "against the cached measured matmul peak (measured once per machine)").default_value(node(true));
  s.add("online.console", Type::kString, "online training (app/online.h, the C API): where the training log goes")
      .choices({"stdout", "stderr", "none"}).default_value(node("stdout"));
  s.add("resume", Type::kString, "auto (the newest valid checkpoint of this run, if any) or a checkpoint path").default_value(node(""));
  // model
  s.add("model.name", Type::kString, "registered model").default_value(node("mlp"));
  models::find_model(model_name).add_keys(s);

  for (const auto& [flag, key] : std::vector<std::pair<std::string, std::string>>{
           {"--batch-size", "data.batch_size"}, {"--epochs", "train.epochs"}, {"--lr", "optim.lr"},
           {"--precision", "precision"}, {"--device", "device"}, {"--accumulation-steps", "train.accumulation_steps"},
           {"--clip-max-norm", "train.clip_max_norm"}, {"--seed", "seed"}, {"--output-dir", "output_dir"},
           {"--max-steps", "train.max_steps"}, {"--name", "name"}, {"--threads", "threads"},
           {"--workers", "data.workers"}, {"--prefetch", "data.prefetch"}, {"--data", "data.path"},
           {"--resume", "resume"}, {"--profile", "profile.window"}}) {
    s.alias(flag, key);
  }
  return s;
}

namespace {

// `load` composes the config with the hardware profile it names (the command line's, if given, instead); a config
// that names none gets `auto`'s (or the command line's) below all of its keys; then the other arguments apply.
config::Config resolve_with_profile(const std::function<config::Config(const config::ProfileResolver&)>& load,
                                    std::vector<std::string> args) {
  const std::optional<std::string> profile = take_profile_argument(args);
  const std::optional<std::string> tuned = take_plan_argument(args);
  const hw::HardwareInfo& hw = hw::HardwareInfo::get();
  config::Config c = load(profile_resolver(hw, profile));
  compose_default_profile(c, hw, profile);
  if (tuned) return apply_tuned_plan(std::move(c), args, *tuned);  // the plan's settings below the command line's
  return resolve_loaded_config(std::move(c), args);
}

}  // namespace

config::Config resolve_config(const std::optional<fs::path>& file, const std::vector<std::string>& args) {
  return resolve_with_profile(
      [&](const config::ProfileResolver& profiles) {
        return file ? config::Config::load(*file, profiles) : config::Config::parse(kDemoConfig, "<embedded demo>", profiles);
      },
      args);
}

config::Config resolve_config_text(const std::string& yaml, const std::string& name, const std::vector<std::string>& args) {
  return resolve_with_profile([&](const config::ProfileResolver& profiles) { return config::Config::parse(yaml, name, profiles); }, args);
}

config::Config resolve_loaded_config(config::Config c, const std::vector<std::string>& args) {
  c.apply_arguments(args, run_schema("mlp").aliases());
  std::string model = "mlp";
  if (c.has("model.name") && c.node("model.name").IsScalar()) model = c.node("model.name").as<std::string>();
  const auto& entry = models::find_model(model);  // unknown names fail here, naming the closest
  run_schema(entry.name).validate(c);
  return c;
}

void validate_run_config(config::Config& c) {
  const std::string model = c.has("model.name") && c.node("model.name").IsScalar() ? c.node("model.name").as<std::string>() : "mlp";
  run_schema(model).validate(c);
}

}  // namespace bellows::app
