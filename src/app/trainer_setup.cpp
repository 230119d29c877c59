// The trainer's options of a run; see trainer_setup.h.
#include "bellows/app/trainer_setup.h"

#include <fmt/format.h>

#include "bellows/config/schema.h"  // defines: get_int, get_double, ...
#include "bellows/util/check.h"

namespace bellows::app {

train::TrainerOptions trainer_options(const config::Config& c, const plan::Plan& p) {
  train::TrainerOptions o;
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
  o.detect_anomaly = config::get_bool(c, "train.detect_anomaly");
  const std::string oom_recovery = config::get_string(c, "train.oom_recovery");
  o.oom_recovery = oom_recovery != "false";
  o.oom_recovery_with_ranks = oom_recovery == "true";
  o.on_nonfinite = config::get_string(c, "train.on_nonfinite");
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
    o.ema = train::EmaOptions{config::get_double(c, "ema.decay"), config::get_int(c, "ema.every_n_steps"), config::get_int(c, "ema.start_step")};
    o.eval_with_ema = config::get_bool(c, "ema.eval");
  }
  BELLOWS_CHECK_CONFIG(o.ema || !config::get_bool(c, "ema.eval"), fmt::format("ema.eval is true but ema.enabled is false ({})", c.origin("ema.eval").str()),
                       "set ema.enabled: true, or drop ema.eval");
  return o;
}

plan::PlanEntry resolve_compile(const config::Config& c, train::TrainerOptions& o, std::int64_t world_size) {
  const std::string asked = config::get_string(c, "compile");
  if (asked == "off") {
    o.compile = "off";
    return {"compile", "off", "steps run eagerly (compile: auto or cuda_graph captures whole steps as CUDA graphs)"};
  }
  const std::string recovery = config::get_string(c, "train.oom_recovery");
  const std::vector<std::string> checkpointing = config::get_string_list(c, "checkpointing");
  train::StepGraphConditions g = train::step_graph_conditions(o, world_size);
  g.oom_recovery = recovery == "true";  // auto is turned off below when the steps are captured
  g.activation_checkpointing = !checkpointing.empty() && !(checkpointing.size() == 1 && checkpointing[0] == "auto");
  const std::string why = train::step_graph_unfit(g);
  if (!why.empty()) {
    // Asked for by name, the trainer says again why it trains eagerly; auto just does.
    o.compile = asked == "cuda_graph" ? "cuda_graph" : "off";
    return {"compile", "off", fmt::format("{}: {}", asked == "auto" ? "auto" : "cuda_graph cannot be used", why)};
  }
  o.compile = "cuda_graph";
  if (recovery == "auto") o.oom_recovery = false;
  return {"compile", "cuda_graph",
          fmt::format("{}whole steps as CUDA graphs after {} warm-up steps (no host sync in a step; a batch of other shapes runs eagerly){}",
                      asked == "auto" ? "auto: " : "", train::kStepGraphWarmup,
                      recovery == "auto" ? "; out-of-memory recovery off (a captured step's memory is fixed)" : "")};
}

models::DropoutMasks dropout_masks_setting(const config::Config& c) {
  return config::get_string(c, "dropout_masks") == "torch" ? models::DropoutMasks::kTorch : models::DropoutMasks::kParallel;
}

}  // namespace bellows::app
