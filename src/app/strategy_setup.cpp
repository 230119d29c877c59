// The run's strategy, and dist.strategy: auto's choice by memory; see strategy_setup.h.
#include "bellows/app/strategy_setup.h"

#include <ATen/ATen.h>
#include <fmt/format.h>

#include <algorithm>
#include <cstring>
#include <map>
#include <unordered_set>

#include "bellows/app/data_setup.h"     // defines: loaded_batch_size, loader_settings
#include "bellows/app/run_settings.h"
#include "bellows/app/trainer_setup.h"  // defines: optimizer_states, trainer_settings, checkpoint_settings
#include "bellows/ckpt/checksum.h"
#include "bellows/config/schema.h"
#include "bellows/dist/ddp.h"
#include "bellows/dist/registry.h"
#include "bellows/models/activation_checkpoint.h"  // defines: Checkpointable
#include "bellows/obs/memory.h"
#include "bellows/plan/strategy.h"
#include "bellows/train/freeze.h"
#include "bellows/train/optimizer.h"  // defines: trainable_parameters
#include "bellows/util/check.h"
#include "bellows/util/exception_report.h"
#include "bellows/util/module_tensors.h"
#include "step_probe.h"

namespace bellows::app {

dist::ProcessInfo process_info(const config::Config& c) {
  const dist::ProcessInfo p = dist::detect_process();
  const std::string name = run_settings(c).strategy;
  BELLOWS_CHECK_CONFIG(name == "auto" || dist::find_strategy(name).several_processes || !p.distributed(),
                       fmt::format("dist.strategy is {} ({}), but the environment names {} processes ({})", name, c.origin("dist.strategy").str(),
                                   p.world_size, p.reason),
                       "use dist.strategy: auto or one for several processes under a launcher, or start one process");
  return p;
}

StrategySetup make_strategy(const config::Config& c, const dist::ProcessInfo& process, const plan::Plan& plan) {
  const std::string asked = run_settings(c).strategy;
  const dist::StrategyEntry& entry = asked == "auto" ? dist::auto_strategy(process.world_size) : dist::find_strategy(asked);
  StrategySetup s;
  s.strategy = entry.make(dist::StrategyRequest{c, process, plan.device, ckpt::sha256_hex(c.to_yaml()).substr(0, 16), nullptr});
  if (!entry.several_processes) {
    s.why = asked == "auto" ? "one process: " + process.reason : "requested";
    return s;
  }
  s.describes = true;
  s.by_memory = asked == "auto";
  // data.batch_size is per process, as in PyTorch's DDP: an optimizer step sees world x batch x accumulation samples.
  const std::int64_t batch = loaded_batch_size(c, process.world_size);
  const std::int64_t k = trainer_settings(c).accumulation_steps;
  s.why = fmt::format("global batch {} = {} ranks x {}{}; {}{}", process.world_size * batch * k, process.world_size, batch,
                      k > 1 ? fmt::format(" x {} micro-batches", k) : "", asked == "auto" ? "" : "requested; ", process.reason);
  return s;
}

dist::MemoryFacts memory_facts(const config::Config& c, const plan::Plan& p, torch::nn::Module& model, const train::TrainerOptions& o,
                               int world_size) {
  dist::MemoryFacts f;
  f.world_size = world_size;
  f.config = &c;
  std::unordered_set<const void*> storages;  // each storage once (a tied weight too)
  const auto held = [&](const at::Tensor& t) -> std::int64_t {
    if (!t.defined() || !t.has_storage() || !storages.insert(t.storage().unsafeGetStorageImpl()).second) return 0;
    return static_cast<std::int64_t>(t.storage().nbytes());
  };
  for (const auto& t : model.parameters()) f.weight_bytes += held(t);
  for (const auto& t : model.buffers()) f.weight_bytes += held(t);
  if (!o.freeze.empty()) train::freeze(named_parameters(model), o.freeze);  // as the trainer will
  std::unordered_set<const c10::TensorImpl*> trainable;
  for (const auto& [name, t] : train::trainable_parameters(named_parameters(model), o.optimizer)) {
    if (trainable.insert(t.unsafeGetTensorImpl()).second) f.trainable_bytes += t.numel() * t.element_size();
  }
  f.trainable_tensors = static_cast<std::int64_t>(trainable.size());
  if (const auto* blocked = dynamic_cast<const models::Checkpointable*>(&model)) {
    std::map<std::string, std::shared_ptr<torch::nn::Module>> modules;
    for (const auto& item : model.named_modules()) modules.emplace(item.key(), item.value());
    for (const std::string& name : blocked->checkpoint_blocks()) {
      const auto it = modules.find(name);
      BELLOWS_CHECK(it != modules.end(), fmt::format("the model names a block {} that is none of its modules", name), "report this bug");
      dist::BlockBytes block{name, {}};
      for (const auto& t : it->second->parameters()) {
        if (trainable.contains(t.unsafeGetTensorImpl())) block.trainable.push_back({t.unsafeGetTensorImpl(), t.numel() * t.element_size()});
      }
      f.blocks.push_back(std::move(block));
    }
  }
  f.optimizer_states = optimizer_states(c);
  f.ema = o.ema.has_value();
  f.ema_eval = o.eval_with_ema;
  f.bucket_bytes = static_cast<std::int64_t>(dist::configured_ddp_options(c).bucket_mb * double(1 << 20));
  const CheckpointSettings checkpoints = checkpoint_settings(c);
  f.checkpoints = checkpoints.enabled;
  f.checkpoint_layout = checkpoints.layout;
  f.host_memory = !p.device.is_cuda();
  return f;
}

void choose_by_memory(StrategySetup& setup, const config::Config& c, const hw::HardwareInfo& hw, const plan::Plan& p,
                      const dist::ProcessInfo& process, torch::nn::Module& model, Task& task, const train::TrainerOptions& options,
                      const data::Dataset& train) {
  dist::Strategy& job = *setup.strategy;
  plan::StrategyRequest r;
  r.facts = memory_facts(c, p, model, options, job.world_size());
  r.local_world_size = process.local_world_size;
  const RunSettings run = run_settings(c);
  r.memory_budget_gib = run.memory_budget_gib;
  if (p.device.is_cpu()) r.limit_bytes = obs::cpu_tensor_limit();
  if (p.device.is_cuda()) r.limit_bytes = static_cast<std::int64_t>(run.gpu_memory_limit_mb * 1e6);
  std::string text;
  if (job.is_main()) {
    // --- the probe step on rank 0: activations (and gradients, subtracted by the entries) ---
    const bool finder = loader_settings(c).batch_auto;
    r.activation_samples = finder ? 1 : std::min(loaded_batch_size(c, job.world_size()), train.size());
    r.activation_basis =
        finder ? "single samples (the largest of 4; data.batch_size: auto fits the micro-batch afterwards)"
               : fmt::format("micro-batches of {} samples (the largest of 4, each spread over the data)", r.activation_samples);
    // Four micro-batches, each of samples at equal strides over the data (as a shuffled batch mixes them), the largest
    // peak: samples of varying size (text padded per batch) make the first samples a poor guess of the run's batches.
    std::int64_t& peak = r.facts.step_peak_bytes;
    try {
      for (std::int64_t k = 0; k < 4 && peak != -2; ++k) {
        const std::int64_t offset = k * std::max<std::int64_t>(1, train.size() / r.activation_samples / 4);
        const data::Batch batch = probe_batch(train, r.activation_samples, /*spread=*/true, offset);
        const std::optional<std::int64_t> step = measure_step_peak(model, task, options, batch);
        peak = step ? std::max(peak, *step) : -2;
      }
    } catch (...) {
      if (!report_current_exception().out_of_memory) throw;
      obs::release_cached_memory(p.device);
      peak = -1;
    }
    const plan::StrategyChoice choice = plan::plan_strategy(r, hw, p);
    text = choice.name + "\n" + choice.entry.reason;
  }
  text = broadcast_text(job, text);
  const auto newline = text.find('\n');
  const std::string name = text.substr(0, newline);
  setup.why += "; " + std::string(job.is_main() ? "" : "rank 0's: ") + text.substr(newline + 1);
  if (name == job.name()) return;
  const dist::StrategyRequest request{c, process, p.device, "", std::dynamic_pointer_cast<dist::Ddp>(setup.strategy)};
  BELLOWS_CHECK(request.joined != nullptr, fmt::format("dist.strategy: auto joined as {}, not a process group", job.name()),
                "report this bug");
  setup.strategy = dist::find_strategy(name).make(request);
}

plan::PlanEntry strategy_row(const StrategySetup& s) {
  return {"strategy", s.strategy->name(), s.describes ? s.strategy->describe() + "; " + s.why : s.why};
}

std::string broadcast_text(dist::Strategy& strategy, const std::string& text) {
  if (strategy.world_size() == 1) return text;
  std::vector<at::Tensor> length{at::full({1}, static_cast<std::int64_t>(text.size()), at::kLong)};
  strategy.broadcast(length, 0);
  const std::int64_t n = length[0].item<std::int64_t>();
  std::vector<at::Tensor> bytes{at::zeros({std::max<std::int64_t>(n, 1)}, at::kByte)};
  if (strategy.is_main()) std::memcpy(bytes[0].data_ptr(), text.data(), text.size());
  strategy.broadcast(bytes, 0);
  return std::string(static_cast<const char*>(bytes[0].data_ptr()), static_cast<std::size_t>(n));
}

}  // namespace bellows::app
