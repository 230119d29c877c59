// Config-driven training runs; see run.h.
#include "bellows/train/run.h"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <torch/utils.h>

#include <fstream>
#include <nlohmann/json.hpp>

#include "bellows/ckpt/checkpoint.h"
#include "bellows/ckpt/inspect.h"
#include "bellows/ckpt/safetensors.h"
#include "bellows/train/checkpointing.h"
#include "bellows/train/data_setup.h"
#include "bellows/hw/hardware_info.h"
#include "bellows/models/activation_checkpoint.h"
#include "bellows/models/registry.h"
#include "bellows/obs/memory.h"
#include "bellows/obs/console_sink.h"
#include "bellows/obs/jsonl_sink.h"
#include "bellows/plan/plan.h"
#include "bellows/util/atomic_file.h"
#include "bellows/util/check.h"

namespace bellows::train {
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
  s.add("precision", Type::kString, "numeric precision policy")
      .choices({"auto", "fp32", "tf32", "bf16-mixed", "fp16-mixed"}).default_value(node("auto"));
  s.add("threads", Type::kInt, "intra-op CPU threads (0: one per usable core)").min(0).default_value(node(0));
  s.add("deterministic", Type::kBool, "deterministic algorithms and cuDNN; bitwise-reproducible runs").default_value(node(false));
  s.add("cudnn_benchmark", Type::kString, "let cuDNN time its algorithms").choices({"auto", "true", "false"}).default_value(node("auto"));
  s.add("channels_last", Type::kBool, "NHWC memory format for 4-D tensors (convolutional models)").default_value(node(false));
  // train
  s.add("train.epochs", Type::kInt, "passes over the training data").min(1).default_value(node(1));
  s.add("train.max_steps", Type::kInt, "stop after this many optimizer steps (0: no limit)").min(0).default_value(node(0));
  s.add("train.accumulation_steps", Type::kInt, "micro-batches per optimizer step").min(1).default_value(node(1));
  s.add("train.clip_max_norm", Type::kDouble, "clip the global gradient L2 norm (0: off)").min(0).default_value(node(0.0));
  s.add("train.clip_value", Type::kDouble, "clamp gradient elements to [-v, v] (0: off)").min(0).default_value(node(0.0));
  s.add("train.log_every_n_steps", Type::kInt, "optimizer steps between logged records").min(1).default_value(node(10));
  s.add("train.eval_every_n_steps", Type::kInt, "optimizer steps between evaluations (0: each epoch end)").min(0).default_value(node(0));
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
  add_data_keys(s);
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
  s.add("profile.record_shapes", Type::kBool, "record operator input shapes").default_value(node(true));
  s.add("profile.memory", Type::kBool, "record tensor allocations").default_value(node(false));
  s.add("checkpointing", Type::kStringList,
        "activation checkpointing: block name patterns (e.g. encoder.layers.*), or auto (the plan decides from a measured step)")
      .default_value(YAML::Load("[]"));
  s.add("memory_budget_gib", Type::kDouble, "memory a training step may use (0: the device's available memory); checkpointing: auto")
      .min(0).default_value(node(0.0));
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
           {"--resume", "resume"}}) {
    s.alias(flag, key);
  }
  return s;
}

config::Config resolve_config(const std::optional<fs::path>& file, const std::vector<std::string>& args) {
  config::Config c = file ? config::Config::load(*file) : config::Config::parse(kDemoConfig, "<embedded demo>");
  c.apply_arguments(args, run_schema("mlp").aliases());
  std::string model = "mlp";
  if (c.has("model.name") && c.node("model.name").IsScalar()) model = c.node("model.name").as<std::string>();
  const auto& entry = models::find_model(model);  // unknown names fail here, naming the closest
  run_schema(entry.name).validate(c);
  return c;
}

namespace {


// The MLP's input width against the data's, before any step: a clear error instead of a shape mismatch
// deep inside the first matmul.
void check_model_input(const config::Config& c, const data::Dataset& train) {
  if (!c.has("model.in_features")) return;
  const data::Batch one = data::first_sample(train);
  const at::Tensor& x = one.at("x");
  const std::int64_t width = x.size(-1);
  BELLOWS_CHECK_CONFIG(config::get_int(c, "model.in_features") == width,
                       fmt::format("model.in_features is {} ({}) but the data's samples have {} features ({})",
                                   config::get_int(c, "model.in_features"), c.origin("model.in_features").str(), width, train.name()),
                       "make the model's input width match the data");
}

// `checkpointing:` -- the named blocks, or with `auto` all blocks when one measured training step would use
// more than 80% of the memory budget. Returns the plan row.
plan::PlanEntry plan_checkpointing(const config::Config& c, const hw::HardwareInfo& hw, const plan::Plan& p, torch::nn::Module& model,
                                   Trainer& trainer, const data::Dataset& train) {
  std::vector<std::string> patterns = config::get_string_list(c, "checkpointing");
  auto* blocks = dynamic_cast<models::Checkpointable*>(&model);
  const bool is_auto = patterns.size() == 1 && patterns[0] == "auto";
  BELLOWS_CHECK_CONFIG(is_auto || std::find(patterns.begin(), patterns.end(), "auto") == patterns.end(),
                       fmt::format("checkpointing: 'auto' must stand alone, got [{}] ({})", fmt::join(patterns, ", "), c.origin("checkpointing").str()),
                       "write checkpointing: auto, or a list of block name patterns");
  if (!is_auto) {
    const auto chosen = models::apply_checkpointing(model, patterns);
    if (chosen.empty()) return {"checkpointing", "off", "default"};
    return {"checkpointing", fmt::format("{} blocks", chosen.size()), fmt::format("requested: {}", fmt::join(chosen, ", "))};
  }
  if (blocks == nullptr || blocks->checkpoint_blocks().empty()) {
    return {"checkpointing", "off", "auto: the model has no checkpointable blocks"};
  }
  std::int64_t budget = static_cast<std::int64_t>(config::get_double(c, "memory_budget_gib") * double(1LL << 30));
  std::string budget_what = "the memory budget";
  if (budget == 0) {
    if (p.device.is_cuda()) {
      for (const auto& g : hw.cuda.gpus) {
        if (g.index == (p.device.has_index() ? p.device.index() : 0)) budget = g.free_memory_bytes;
      }
      budget_what = "free GPU memory";
    } else {
      budget = hw.memory.available_bytes;
      budget_what = "available memory";
    }
  }
  const std::int64_t batch_size = std::min<std::int64_t>(config::get_int(c, "data.batch_size"), train.size());
  std::vector<std::int64_t> first(static_cast<std::size_t>(batch_size));
  for (std::int64_t i = 0; i < batch_size; ++i) first[static_cast<std::size_t>(i)] = i;
  data::FetchContext context;
  data::Batch batch = train.get_batch(first, context);
  train.finish_on_device(batch);
  const auto plain = trainer.measure_step_memory(batch);
  if (!plain) return {"checkpointing", "off", "auto: memory on this device is not counted"};
  const auto gib = [](std::int64_t b) { return static_cast<double>(b) / double(1LL << 30); };
  if (budget <= 0 || *plain <= budget * 8 / 10) {
    return {"checkpointing", "off",
            fmt::format("auto: a step peaks at {:.2f} GiB, within 80% of {} ({:.2f} GiB)", gib(*plain), budget_what, gib(budget))};
  }
  const auto all = blocks->checkpoint_blocks();
  blocks->set_checkpointed(all);
  const auto checkpointed = trainer.measure_step_memory(batch);
  return {"checkpointing", fmt::format("{} blocks", all.size()),
          fmt::format("auto: a step peaks at {:.2f} GiB, over 80% of {} ({:.2f} GiB); checkpointed: {:.2f} GiB", gib(*plain),
                      budget_what, gib(budget), gib(checkpointed.value_or(0)))};
}

TrainerOptions trainer_options(const config::Config& c, const plan::Plan& p) {
  TrainerOptions o;
  o.device = p.device;
  o.precision = p.precision;
  o.channels_last = p.channels_last;
  o.non_blocking = p.pin_memory;
  o.scaler.init_scale = config::get_double(c, "scaler.init_scale");
  o.scaler.growth_factor = config::get_double(c, "scaler.growth_factor");
  o.scaler.backoff_factor = config::get_double(c, "scaler.backoff_factor");
  o.scaler.growth_interval = config::get_int(c, "scaler.growth_interval");
  o.epochs = config::get_int(c, "train.epochs");
  o.max_steps = config::get_int(c, "train.max_steps");
  o.accumulation_steps = config::get_int(c, "train.accumulation_steps");
  o.clip_max_norm = config::get_double(c, "train.clip_max_norm");
  o.clip_value = config::get_double(c, "train.clip_value");
  o.log_every_n_steps = config::get_int(c, "train.log_every_n_steps");
  o.eval_every_n_steps = config::get_int(c, "train.eval_every_n_steps");
  o.freeze = config::get_string_list(c, "train.freeze");
  auto& opt = o.optimizer;
  opt.type = config::get_string(c, "optim.type");
  opt.lr = config::get_double(c, "optim.lr");
  const auto betas = config::get_double_list(c, "optim.betas");
  BELLOWS_CHECK_CONFIG(betas.size() == 2, fmt::format("optim.betas has {} values, expected 2 ({})", betas.size(), c.origin("optim.betas").str()),
                       "write optim.betas: [0.9, 0.999]");
  opt.beta1 = betas[0];
  opt.beta2 = betas[1];
  opt.eps = config::get_double(c, "optim.eps");
  opt.weight_decay = config::get_double(c, "optim.weight_decay");
  opt.momentum = config::get_double(c, "optim.momentum");
  opt.nesterov = config::get_bool(c, "optim.nesterov");
  opt.dampening = config::get_double(c, "optim.dampening");
  opt.implementation = config::get_string(c, "optim.implementation");
  opt.no_decay_patterns = config::get_string_list(c, "optim.no_decay");
  auto& sch = o.schedule;
  sch.type = config::get_string(c, "schedule.type");
  sch.warmup_steps = config::get_int(c, "schedule.warmup_steps");
  sch.warmup_start_factor = config::get_double(c, "schedule.warmup_start_factor");
  sch.total_steps = config::get_int(c, "schedule.total_steps");
  sch.min_lr_factor = config::get_double(c, "schedule.min_lr_factor");
  sch.step_size = config::get_int(c, "schedule.step_size");
  sch.gamma = config::get_double(c, "schedule.gamma");
  sch.factor = config::get_double(c, "schedule.factor");
  sch.patience = config::get_int(c, "schedule.patience");
  sch.threshold = config::get_double(c, "schedule.threshold");
  sch.mode = config::get_string(c, "schedule.mode");
  if (config::get_bool(c, "ema.enabled")) {
    o.ema = EmaOptions{config::get_double(c, "ema.decay"), config::get_int(c, "ema.every_n_steps"), config::get_int(c, "ema.start_step")};
    o.eval_with_ema = config::get_bool(c, "ema.eval");
  }
  BELLOWS_CHECK_CONFIG(o.ema || !config::get_bool(c, "ema.eval"), fmt::format("ema.eval is true but ema.enabled is false ({})", c.origin("ema.eval").str()),
                       "set ema.enabled: true, or drop ema.eval");
  return o;
}

// A fresh directory for the run: <output_dir>/<name>, or <name>-2, -3, ... when that one holds a run.
// A resumed run continues in <output_dir>/<name>.
fs::path make_run_dir(const config::Config& c) {
  const fs::path base = fs::path(config::get_string(c, "output_dir")) / config::get_string(c, "name");
  fs::path dir = base;
  const bool resuming = !config::get_string(c, "resume").empty();
  for (int i = 2; !resuming && fs::exists(dir) && !fs::is_empty(dir); ++i) dir = base.string() + "-" + std::to_string(i);
  std::error_code ec;
  fs::create_directories(dir, ec);
  BELLOWS_CHECK_RESOURCE(!ec, fmt::format("cannot create run directory {}: {}", dir.string(), ec.message()),
                         "check output_dir and its permissions");
  return dir;
}


void trainer_message(const RunOptions& options, const std::string& text) {
  if (options.console) std::fprintf(options.console, "%s\n", text.c_str());
}

std::vector<std::pair<std::string, std::string>> header_rows(const hw::HardwareInfo& hw, const plan::Plan& p) {
  std::vector<std::pair<std::string, std::string>> rows;
  rows.emplace_back("machine", fmt::format("{}; {} cores usable; {:.1f} GiB RAM; LibTorch {}", hw.cpu.model_name, hw.cpu.usable_cpus,
                                           hw.memory.total_bytes / double(1LL << 30), hw.torch.version));
  std::string gpus;
  for (const auto& g : hw.cuda.gpus) gpus += fmt::format("{}cuda:{} {} ({:.0f} GiB)", gpus.empty() ? "" : ", ", g.index, g.name, g.total_memory_bytes / double(1LL << 30));
  rows.emplace_back("gpu", hw.cuda.usable ? gpus : hw.cuda.reason);
  for (const auto& e : p.entries) rows.emplace_back(e.key, fmt::format("{:<11} {}", e.value, e.reason));
  return rows;
}

}  // namespace

plan::PlanRequest plan_request(const config::Config& c) {
  plan::PlanRequest r;
  r.device = config::get_string(c, "device");
  r.precision = config::get_string(c, "precision");
  r.threads = config::get_int(c, "threads");
  r.deterministic = config::get_bool(c, "deterministic");
  r.cudnn_benchmark = config::get_string(c, "cudnn_benchmark");
  r.channels_last = config::get_bool(c, "channels_last");
  r.pin_memory = config::get_string(c, "data.pin_memory");
  r.workers = config::get_int(c, "data.workers");
  return r;
}

RunResult run(const config::Config& c, const RunOptions& options) {
  // --- plan: hardware facts + requested settings -> concrete settings with reasons ---
  const hw::HardwareInfo& hw = hw::HardwareInfo::get();
  const plan::Plan p = plan::resolve(plan_request(c), hw);
  plan::apply(p);
  obs::install_cpu_tracking();  // tensor memory on the CPU is counted from here on (obs/memory.h)
  const auto seed = static_cast<std::uint64_t>(config::get_int(c, "seed"));
  torch::manual_seed(seed);

  // --- data: datasets, samplers, prefetching loaders on the planned device ---
  Loaders loaders = make_loaders(c, p);
  check_model_input(c, *loaders.splits.train);

  // --- model, task, trainer ---
  models::BuiltModel built = models::find_model(config::get_string(c, "model.name")).build(c, models::ModelContext{loaders.splits.train});
  if (const std::string init = config::get_string(c, "init_weights"); !init.empty()) {
    // Pretrained weights (e.g. a frozen encoder, seed 004), by name; a resumed checkpoint overrides them.
    const auto differences = load_model_tensors(*built.module, ckpt::read_safetensors(init), config::get_bool(c, "init_weights_strict"));
    trainer_message(options, fmt::format("loaded weights from {}{}", init,
                                         differences.empty() ? std::string()
                                                             : fmt::format("; {} tensors did not match: {}", differences.size(), fmt::join(differences, "; "))));
  }
  // --- run directory ---
  const fs::path dir = make_run_dir(c);
  TrainerOptions trainer_opts = trainer_options(c, p);
  trainer_opts.stop_flag = options.stop_flag;
  if (config::get_bool(c, "checkpoint.enabled")) {
    auto& co = trainer_opts.checkpoint;
    co.dir = dir / "checkpoints";
    co.every_n_steps = config::get_int(c, "checkpoint.every_n_steps");
    co.every_n_minutes = config::get_double(c, "checkpoint.every_n_minutes");
    co.keep_last = config::get_int(c, "checkpoint.keep_last");
    co.keep_best = config::get_bool(c, "checkpoint.keep_best");
    co.at_end = config::get_bool(c, "checkpoint.at_end");
  }
  if (config::get_bool(c, "profile.enabled")) {
    auto& po = trainer_opts.profile;
    po.enabled = true;
    po.start_step = config::get_int(c, "profile.start_step");
    po.steps = config::get_int(c, "profile.steps");
    po.record_shapes = config::get_bool(c, "profile.record_shapes");
    po.profile_memory = config::get_bool(c, "profile.memory");
    po.path = dir / "trace.json";
  }
  trainer_opts.checkpoint_info = {{"config", c.to_yaml()}, {"plan", nlohmann::json::parse(p.to_json())}};
  Trainer trainer(built.module, built.task, trainer_opts);
  const plan::PlanEntry checkpointing = plan_checkpointing(c, hw, p, *built.module, trainer, *loaders.splits.train);

  // --- sinks ---
  write_file_atomically(dir / "config.resolved.yaml", c.to_yaml());  // a resumed run rewrites them
  plan::Plan recorded = p;  // the plan with the model-dependent rows
  recorded.entries.push_back(checkpointing);
  write_file_atomically(dir / "plan.json", recorded.to_json());
  trainer.set_run_info(config::get_string(c, "name"), dir.string());
  auto header = header_rows(hw, p);
  header.emplace_back(checkpointing.key, fmt::format("{:<11} {}", checkpointing.value, checkpointing.reason));
  trainer.set_header(std::move(header));
  if (options.console) trainer.add_sink(std::make_shared<obs::ConsoleSink>(options.console, options.tty));
  trainer.add_sink(std::make_shared<obs::JsonlSink>(dir / "metrics.jsonl"));

  // --- resume: the newest valid checkpoint of this run (auto) or the one named ---
  const std::string resume = config::get_string(c, "resume");
  if (!resume.empty()) {
    std::optional<fs::path> from;
    if (resume == "auto") {
      std::vector<std::string> skipped;
      from = ckpt::find_latest_valid(dir / "checkpoints", &skipped);
      for (const auto& s : skipped) trainer_message(options, fmt::format("warning: skipped checkpoint {}", s));
      if (!from) trainer_message(options, fmt::format("resume auto: no valid checkpoint in {}; starting from the beginning", (dir / "checkpoints").string()));
    } else {
      from = ckpt::resolve_checkpoint(resume);
    }
    if (from) {
      const ckpt::Checkpoint cp = ckpt::load_checkpoint(*from);
      trainer.restore(cp, *loaders.train, config::get_bool(c, "checkpoint.strict"));
      trainer_message(options, fmt::format("resumed from {} (step {}, epoch {})", from->string(), cp.step, cp.epoch));
    }
  }

  RunResult result;
  result.run_dir = dir;
  result.fit = trainer.fit(*loaders.train, loaders.val.get());
  result.data = loaders.train->stats();
  if (options.console) {
    const data::LoaderStats& d = result.data;
    std::fprintf(options.console, "%s\n",
                 fmt::format("data: {}; the training step waited for batches {:.1f}% of {:.1f} s; queue peak {:.1f} MB; "
                             "`bellows bench data` measures the pipeline alone",
                             d.workers > 0 ? fmt::format("{} worker(s), prefetch {}", d.workers, d.prefetch) : std::string("synchronous"),
                             d.wall_seconds > 0 ? 100 * d.wait_seconds / d.wall_seconds : 0.0, d.wall_seconds,
                             d.queue_bytes_peak / 1e6).c_str());
  }
  return result;
}

}  // namespace bellows::train
