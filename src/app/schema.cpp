// The run config's schema and loading; see schema.h.
#include "bellows/app/schema.h"

#include <fmt/format.h>

#include "bellows/app/data_setup.h"
#include "bellows/app/profiles.h"
#include "bellows/app/run.h"
#include "bellows/app/run_settings.h"
#include "bellows/app/trainer_setup.h"
#include "bellows/app/tuned_plan.h"
#include "bellows/data/build.h"
#include "bellows/dist/registry.h"
#include "bellows/hw/hardware_info.h"
#include "bellows/models/registry.h"
#include "bellows/precision/precision.h"
#include "bellows/util/check.h"

namespace bellows::app {
namespace fs = std::filesystem;
using config::Type;

namespace {

// The embedded demo's part that every model shares; the model's own part (models::ModelDemo: its data: and model:
// blocks) completes it. Changing it changes the numbers README.md shows for the default demo (the MLP's).
const char* const kDemoCommon = R"(# bellows' embedded demo: a model learns data made by a fixed random teacher; a few
# seconds on 2 cores. The data and model keys are those of the model's demo (models::ModelDemo; default: the MLP).
name: demo
seed: 0
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

constexpr const char* kDemoModel = "mlp";  // the default demo's, and model.name's default

// The model a command line names (model.name=NAME, or a model map), for the demo without a config file: the
// default demo's without one. Read from the arguments alone, so that none of the MLP's keys reach another model.
std::string demo_model_argument(std::vector<std::string> args) {
  take_profile_argument(args);
  take_plan_argument(args);
  config::Config given;
  given.apply_arguments(args, run_schema(kDemoModel).aliases());
  const YAML::Node name = given.node("model.name");
  return name.IsDefined() && name.IsScalar() ? name.as<std::string>() : kDemoModel;
}

}  // namespace

config::Config demo_config(const std::string& model_name, const config::ProfileResolver& profiles) {
  const models::ModelEntry& entry = models::find_model(model_name);  // an unknown name fails here, naming the closest
  BELLOWS_CHECK_CONFIG(
      !entry.demo.yaml.empty(), fmt::format("model {} has no embedded demo, and no config file was given", entry.name),
      fmt::format("give a config file with the model's data: bellows train run.yaml (bellows config keys --model {} "
                  "lists its keys)",
                  entry.name));
  config::Config c = config::Config::parse(kDemoCommon, kDemoName, profiles);
  const config::Config part = config::Config::parse(entry.demo.yaml, fmt::format("<embedded demo of {}>", entry.name));
  if (!part.has("data")) {  // the MLP demo's table (a scripted model's inputs are unknown until it is given data)
    config::Config table = config::Config::parse(models::find_model(kDemoModel).demo.yaml,
                                                 fmt::format("<embedded demo of {}>", kDemoModel));
    table.erase("model");
    c.merge(table);
  }
  c.merge(part);
  if (entry.name != kDemoModel) {  // a run directory of its own beside the default demo's
    c.set("name", YAML::Node("demo-" + entry.name),
          config::Origin::noted(fmt::format("the embedded demo of model {}", entry.name)));
  }
  const YAML::Node kind = c.node("data.kind");  // what the synthetic source makes; another source by its name
  c.add_plan_note(
      {"demo", kind.IsScalar() ? kind.as<std::string>() : c.node("data.source").as<std::string>(""),
       fmt::format("no config file: the embedded demo of model {} trains on {}; model widths and class counts it does "
                   "not set are the data's",
                   entry.name, entry.demo.data)});
  return c;
}

namespace {

// What PyTorch, Lightning, Hugging Face's Trainer, timm and Keras call the keys of a run, for the did-you-mean of an
// unknown key whose last part is one of them (config::Schema::common_name: optim.learning_rate -> optim.lr). Written
// by hand: no library knows these names. Each name stands for one key here, the closest in meaning; names that mean
// different things in different tools (dropout, num_classes: a model's own keys) are left out. The flag aliases'
// names (batch_size, clip_max_norm) count without being listed.
constexpr std::pair<const char*, const char*> kCommonNames[] = {
    // optimizer
    {"learning_rate", "optim.lr"},  // HF TrainingArguments, Keras optimizers
    {"base_lr", "optim.lr"},
    {"optimizer", "optim.type"},  // a name, where a key holds one (optimizer: sgd)
    {"opt", "optim.type"},        // timm --opt
    {"optim_type", "optim.type"},
    {"wd", "optim.weight_decay"},
    {"adam_epsilon", "optim.eps"},  // HF
    {"opt_eps", "optim.eps"},       // timm
    {"epsilon", "optim.eps"},       // Keras
    {"adam_beta1", "optim.betas"},  // HF
    {"adam_beta2", "optim.betas"},
    {"opt_betas", "optim.betas"},  // timm
    // schedule
    {"lr_scheduler_type", "schedule.type"},  // HF
    {"lr_scheduler", "schedule.type"},
    {"scheduler", "schedule.type"},
    {"sched", "schedule.type"},                     // timm
    {"num_warmup_steps", "schedule.warmup_steps"},  // HF get_scheduler
    {"warmup_iters", "schedule.warmup_steps"},
    {"min_lr", "schedule.min_lr_factor"},  // timm (an absolute rate there; a fraction of optim.lr here)
    // length of the run
    {"max_epochs", "train.epochs"},  // Lightning Trainer
    {"num_epochs", "train.epochs"},
    {"num_train_epochs", "train.epochs"},  // HF
    {"n_epochs", "train.epochs"},
    {"max_iters", "train.max_steps"},
    {"num_steps", "train.max_steps"},
    {"total_steps", "train.max_steps"},
    // batches and gradients
    {"per_device_train_batch_size", "data.batch_size"},  // HF
    {"train_batch_size", "data.batch_size"},
    {"micro_batch_size", "data.batch_size"},
    {"accumulate_grad_batches", "train.accumulation_steps"},      // Lightning Trainer
    {"gradient_accumulation_steps", "train.accumulation_steps"},  // HF
    {"grad_accum_steps", "train.accumulation_steps"},
    {"grad_clip", "train.clip_max_norm"},
    {"gradient_clip_val", "train.clip_max_norm"},  // Lightning Trainer
    {"max_grad_norm", "train.clip_max_norm"},      // HF
    {"clip_grad", "train.clip_max_norm"},          // timm
    {"clip_grad_norm", "train.clip_max_norm"},     // torch.nn.utils.clip_grad_norm_
    {"clipnorm", "train.clip_max_norm"},           // Keras optimizers
    {"clip_grad_value", "train.clip_value"},       // torch.nn.utils.clip_grad_value_
    {"clipvalue", "train.clip_value"},             // Keras optimizers
    // numerics
    {"mixed_precision", "precision"},  // Accelerate
    {"fp16", "precision"},             // HF (fp16-mixed here)
    {"bf16", "precision"},             // HF (bf16-mixed here)
    {"amp", "precision"},              // timm --amp
    {"random_seed", "seed"},
    {"manual_seed", "seed"},           // torch.manual_seed
    {"benchmark", "cudnn_benchmark"},  // Lightning Trainer, torch.backends.cudnn.benchmark
    {"accelerator", "device"},         // Lightning Trainer
    // data
    {"num_workers", "data.workers"},             // torch.utils.data.DataLoader
    {"dataloader_num_workers", "data.workers"},  // HF
    {"prefetch_factor", "data.prefetch"},        // DataLoader (batches per worker there; in the queue here)
    {"dataloader_pin_memory", "data.pin_memory"},
    {"train_file", "data.path"},  // HF example scripts
    {"data_dir", "data.path"},    // timm
    {"data_path", "data.path"},
    {"validation_file", "data.val_path"},  // HF example scripts
    {"val_data", "data.val_path"},
    {"validation_split", "data.val_fraction"},  // Keras fit
    // evaluation, logging, checkpoints
    {"val_check_interval", "train.eval_every_n_steps"},   // Lightning Trainer (a fraction of an epoch too, there)
    {"eval_steps", "train.eval_every_n_steps"},           // HF
    {"logging_steps", "train.log_every_n_steps"},         // HF
    {"log_interval", "train.log_every_n_steps"},          // timm
    {"save_steps", "checkpoint.every_n_steps"},           // HF
    {"every_n_train_steps", "checkpoint.every_n_steps"},  // Lightning ModelCheckpoint
    {"save_total_limit", "checkpoint.keep_last"},         // HF
    {"default_root_dir", "output_dir"},                   // Lightning Trainer
    {"run_name", "name"},                                 // HF
    {"resume_from_checkpoint", "resume"},                 // HF
    {"ckpt_path", "resume"},                              // Lightning Trainer.fit
    {"pretrained_weights", "init_weights"},
    {"initial_checkpoint", "init_weights"},       // timm
    {"gradient_checkpointing", "checkpointing"},  // HF
    {"activation_checkpointing", "checkpointing"},
    {"model_ema", "ema.enabled"},      // timm
    {"model_ema_decay", "ema.decay"},  // timm
    {"ema_decay", "ema.decay"},
};

// The registered strategies' own keys (dist/registry.h); dist.strategy itself is a RunSettings key.
void add_strategy_keys(config::Schema& s) {
  for (const auto& entry : dist::strategy_entries()) {
    if (entry.add_keys) entry.add_keys(s);
  }
}

// The command line's flags for common keys, and other tools' names for them (kCommonNames).
void add_run_key_names(config::Schema& s) {
  for (const auto& [flag, key] : std::vector<std::pair<std::string, std::string>>{
           {"--batch-size", "data.batch_size"}, {"--epochs", "train.epochs"}, {"--lr", "optim.lr"},
           {"--precision", "precision"}, {"--device", "device"}, {"--accumulation-steps", "train.accumulation_steps"},
           {"--clip-max-norm", "train.clip_max_norm"}, {"--seed", "seed"}, {"--output-dir", "output_dir"},
           {"--max-steps", "train.max_steps"}, {"--name", "name"}, {"--threads", "threads"},
           {"--workers", "data.workers"}, {"--prefetch", "data.prefetch"}, {"--data", "data.path"},
           {"--resume", "resume"}, {"--profile", "profile.window"}}) {
    s.alias(flag, key);
  }
  for (const auto& [name, key] : kCommonNames) s.common_name(name, key);
}

}  // namespace

config::Schema run_schema(const std::string& model_name) {
  config::Schema s;
  add_run_setting_keys(s);  // the run's own keys (run_settings.h)
  // The keys bound to options structs (config/binding.h): the plan's (run.h), the trainer's (trainer_setup.h)
  add_plan_keys(s);
  add_trainer_keys(s);
  add_strategy_keys(s);
  add_loader_keys(s);
  data::add_dataset_keys(s);
  models::find_model(model_name).add_keys(s);
  add_run_key_names(s);
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
  const std::string demo_model = file ? std::string() : demo_model_argument(args);
  return resolve_with_profile(
      [&](const config::ProfileResolver& profiles) {
        return file ? config::Config::load(*file, profiles) : demo_config(demo_model, profiles);
      },
      args);
}

config::Config resolve_config_text(const std::string& yaml, const std::string& name, const std::vector<std::string>& args) {
  return resolve_with_profile([&](const config::ProfileResolver& profiles) { return config::Config::parse(yaml, name, profiles); }, args);
}

namespace {

// The model a config names before it is validated (its keys are part of the schema it is validated against).
std::string model_named_in(const config::Config& c) {
  return c.has("model.name") && c.node("model.name").IsScalar() ? c.node("model.name").as<std::string>() : "mlp";
}

}  // namespace

config::Config resolve_loaded_config(config::Config c, const std::vector<std::string>& args) {
  c.apply_arguments(args, run_schema("mlp").aliases());
  const auto& entry = models::find_model(model_named_in(c));  // unknown names fail here, naming the closest
  run_schema(entry.name).validate(c);
  return c;
}

void validate_run_config(config::Config& c) { run_schema(model_named_in(c)).validate(c); }

}  // namespace bellows::app
