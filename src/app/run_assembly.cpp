// One assembly of a run; see run_assembly.h.
#include "run_assembly.h"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <torch/utils.h>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <map>
#include <unordered_set>

#include "bellows/app/model_setup.h"
#include "bellows/app/precision_trial.h"
#include "bellows/app/profiles.h"
#include "bellows/app/run.h"
#include "bellows/app/strategy_setup.h"
#include "bellows/app/trainer_setup.h"
#include "bellows/ckpt/checkpoint.h"
#include "bellows/ckpt/inspect.h"
#include "bellows/config/paths.h"  // defines: check_path_exists
#include "bellows/dist/ddp.h"
#include "bellows/dist/registry.h"
#include "bellows/hw/hardware_info.h"
#include "bellows/hw/peaks.h"
#include "bellows/precision/registry.h"
#include "bellows/models/activation_checkpoint.h"
#include "bellows/models/dropout.h"
#include "bellows/plan/batch_size.h"
#include "bellows/plan/checkpointing.h"
#include "bellows/plan/strategy.h"
#include "bellows/train/step_graph.h"
#include "bellows/util/atomic_file.h"
#include "bellows/util/check.h"
#include "bellows/util/exception_report.h"

namespace bellows::app {
namespace fs = std::filesystem;
using train::Trainer;

namespace {

// `samples` samples of the training data as one batch for a probe step: the first ones, or with `spread` the ones at equal strides over
// the whole data from `start` on (as a shuffled batch mixes them: samples of varying size are padded to the largest).
data::Batch probe_batch(const data::Dataset& train, std::int64_t samples, bool spread = false, std::int64_t start = 0) {
  samples = std::min(samples, train.size());
  const std::int64_t stride = spread ? train.size() / samples : 1;
  std::vector<std::int64_t> first(static_cast<std::size_t>(samples));
  for (std::int64_t i = 0; i < samples; ++i) first[static_cast<std::size_t>(i)] = spread ? (start + i * stride) % train.size() : i;
  data::FetchContext context;
  data::Batch batch = train.get_batch(first, context);
  train.finish_on_device(batch);
  return batch;
}

// The plan's "strategy" row with a strategy's describe() `from` in its reason replaced by `to`.
void redescribe_strategy(plan::Plan& p, const std::string& from, const std::string& to) {
  for (plan::PlanEntry& e : p.entries) {
    const auto at = e.key == "strategy" ? e.reason.find(from) : std::string::npos;
    if (at != std::string::npos) e.reason.replace(at, from.size(), to);
  }
}

// State tensors the optimizer keeps per trainable parameter: Adam's two moments, SGD's momentum (or none).
int optimizer_states(const config::Config& c) {
  if (config::get_string(c, "optim.type") != "sgd") return 2;
  return config::get_double(c, "optim.momentum") > 0 ? 1 : 0;
}

// `data.batch_size: auto` -- the finder decides (plan/batch_size.h) from measured steps on the first samples; the
// loaded batch (train.global_batch_size / ranks) then runs as that many micro-batches. Rank 0's choice is every
// rank's.
plan::PlanEntry plan_micro_batch(const config::Config& c, const hw::HardwareInfo& hw, const plan::Plan& p, Trainer& trainer,
                                 const data::Dataset& train, dist::Strategy& ranks) {
  plan::MicroBatchRequest request;
  request.loaded_batch = std::min(loaded_batch_size(c, ranks.world_size()), train.size());
  request.memory_budget_gib = config::get_double(c, "memory_budget_gib");
  const obs::MemoryStats mem = obs::memory_stats(p.device);
  request.held_bytes = mem.tracked ? mem.current_bytes : 0;
  if (p.device.is_cpu()) request.limit_bytes = obs::cpu_tensor_limit();  // an emulated smaller machine
  if (p.device.is_cuda()) request.limit_bytes = static_cast<std::int64_t>(config::get_double(c, "gpu_memory_limit_mb") * 1e6);
  // Not in a probe step: the optimizer's state (Adam: two tensors per parameter; SGD with momentum: one) and EMA's copy.
  // Under zero1 and zero2 the optimizer holds this rank's share.
  std::int64_t param_bytes = 0, shard_bytes = 0;
  for (const auto& t : trainer.trainable()) param_bytes += t.numel() * t.element_size();
  for (const auto& t : trainer.optimizer().parameters()) shard_bytes += t.numel() * t.element_size();
  const int states = optimizer_states(c);
  const int copies = states + (config::get_bool(c, "ema.enabled") ? 1 : 0);
  request.later_bytes = shard_bytes * states + param_bytes * (copies - states);
  // On the CPU a checkpoint's host copy of the weights and that state is tensor memory too, while training goes on.
  if (p.device.is_cpu() && config::get_bool(c, "checkpoint.enabled")) request.later_bytes += param_bytes * (1 + copies);
  std::optional<data::Batch> batch;  // the loaded batch's samples, fetched once; trials take the first b
  plan::MicroBatchProbe probe;
  probe.measure_step = [&](std::int64_t samples) {
    if (!batch) batch = probe_batch(train, request.loaded_batch);
    return trainer.measure_step_memory(batch->slice(0, std::min(samples, batch->size)));
  };
  probe.release = [&] { obs::release_cached_memory(p.device); };
  plan::MicroBatchChoice choice;
  std::string text;
  if (ranks.is_main()) {
    choice = plan::plan_micro_batch(request, hw, p, probe);
    text = fmt::format("{}\n{}\n{}", choice.parts, choice.entry.value, choice.entry.reason);
  }
  text = broadcast_text(ranks, text);
  const auto first = text.find('\n'), second = text.find('\n', first + 1);
  trainer.set_micro_split(std::stoll(text.substr(0, first)));
  return {"micro_batch", text.substr(first + 1, second - first - 1),
          ranks.is_main() ? choice.entry.reason : "rank 0's: " + text.substr(second + 1)};
}

// dist.strategy: auto on several processes -- they met as ddp; with the model built and a trainer on it, the plan
// decides by memory (plan/strategy.h) from the model's bytes and probe steps on rank 0 (four micro-batches; single
// samples under data.batch_size: auto, whose finder later fits the micro-batch to the strategy chosen). Every rank
// takes rank 0's choice. Returns the plan row and, where zero2 or fsdp is chosen, that strategy on the same process
// group (nullptr: ddp stays).
std::pair<plan::PlanEntry, std::shared_ptr<dist::Strategy>> plan_strategy(const config::Config& c, const hw::HardwareInfo& hw,
                                                                        const plan::Plan& p, const dist::ProcessInfo& process,
                                                                        const std::shared_ptr<dist::Strategy>& job,
                                                                        torch::nn::Module& model, Trainer& trainer,
                                                                        const data::Dataset& train) {
  dist::Strategy& joined = *job;
  plan::StrategyRequest r;
  r.world_size = joined.world_size();
  r.local_world_size = process.local_world_size;
  r.weight_bytes = trainer.held_by_category()[0];  // under ddp every weight, each storage once (a tied weight too)
  std::unordered_set<const c10::TensorImpl*> trainable;
  for (const auto& t : trainer.trainable()) {
    if (trainable.insert(t.unsafeGetTensorImpl()).second) r.trainable_bytes += t.numel() * t.element_size();
  }
  r.trainable_tensors = static_cast<std::int64_t>(trainable.size());
  // fsdp's units: the blocks dist.fsdp_units selects (every block where it is empty), their trainable weights.
  auto* blocked = dynamic_cast<models::Checkpointable*>(&model);
  const std::vector<std::string> blocks = blocked ? blocked->checkpoint_blocks() : std::vector<std::string>{};
  if (blocks.empty()) {
    r.fsdp_unfit = "the model has no named blocks to gather one at a time";
  } else if (config::get_bool(c, "ema.eval")) {
    r.fsdp_unfit = "ema.eval: no rank would hold the whole average";
  } else {
    const std::vector<std::string> patterns = config::get_string_list(c, "dist.fsdp_units");
    const std::vector<std::string> units = patterns.empty() ? blocks : models::select_blocks(patterns, blocks, "dist.fsdp_units");
    std::map<std::string, std::shared_ptr<torch::nn::Module>> modules;
    for (const auto& item : model.named_modules()) modules.emplace(item.key(), item.value());
    std::unordered_set<const c10::TensorImpl*> in_units;
    for (const std::string& name : units) {
      std::int64_t bytes = 0;
      for (const auto& t : modules.at(name)->parameters()) {
        if (!trainable.contains(t.unsafeGetTensorImpl())) continue;
        if (!in_units.insert(t.unsafeGetTensorImpl()).second) {
          r.fsdp_unfit = fmt::format("a weight of block {} is in another unit too (tied)", name);
          continue;
        }
        bytes += t.numel() * t.element_size();
      }
      r.unit_bytes += bytes;
      r.largest_unit_bytes = std::max(r.largest_unit_bytes, bytes);
    }
  }
  r.optimizer_states = optimizer_states(c);
  r.ema = config::get_bool(c, "ema.enabled");
  r.bucket_bytes = static_cast<std::int64_t>(config::get_double(c, "dist.bucket_mb") * double(1 << 20));
  r.memory_budget_gib = config::get_double(c, "memory_budget_gib");
  if (p.device.is_cpu()) r.limit_bytes = obs::cpu_tensor_limit();
  if (p.device.is_cuda()) r.limit_bytes = static_cast<std::int64_t>(config::get_double(c, "gpu_memory_limit_mb") * 1e6);
  std::string text;
  if (joined.is_main()) {
    // --- the probe step on rank 0: activations (and gradients, subtracted by the plan) ---
    const std::int64_t loaded = std::min(loaded_batch_size(c, r.world_size), train.size());
    r.activation_samples = config::is_word(c, "data.batch_size", "auto") ? 1 : (loaded + trainer.micro_split() - 1) / trainer.micro_split();
    r.activation_basis = config::is_word(c, "data.batch_size", "auto")
                             ? "single samples (the largest of 4; data.batch_size: auto fits the micro-batch afterwards)"
                             : fmt::format("micro-batches of {} samples (the largest of 4, each spread over the data)", r.activation_samples);
    // Four micro-batches, each of samples at equal strides over the data (as a shuffled batch mixes them), the largest
    // peak: samples of varying size (text padded per batch) make the first samples a poor guess of the run's batches.
    try {
      for (std::int64_t k = 0; k < 4 && r.step_peak_bytes != -2; ++k) {
        const std::int64_t offset = k * std::max<std::int64_t>(1, train.size() / r.activation_samples / 4);
        const std::optional<std::int64_t> peak = trainer.measure_step_memory(probe_batch(train, r.activation_samples, true, offset));
        r.step_peak_bytes = peak ? std::max(r.step_peak_bytes, *peak) : -2;
      }
    } catch (...) {
      if (!report_current_exception().out_of_memory) throw;
      obs::release_cached_memory(p.device);
      r.step_peak_bytes = -1;
    }
    const plan::StrategyChoice choice = plan::plan_strategy(r, hw, p);
    text = choice.name + "\n" + choice.entry.reason;
  }
  text = broadcast_text(joined, text);
  const auto newline = text.find('\n');
  const std::string name = text.substr(0, newline);
  plan::PlanEntry row{"strategy", name, (joined.is_main() ? "" : "rank 0's: ") + text.substr(newline + 1)};
  if (name == "ddp") return {row, nullptr};
  const dist::StrategyRequest request{c, process, p.device, "", std::dynamic_pointer_cast<dist::Ddp>(job)};
  BELLOWS_CHECK(request.joined != nullptr, fmt::format("dist.strategy: auto joined as {}, not ddp", joined.name()), "report this bug");
  return {row, dist::find_strategy(name).make(request)};
}

// `checkpointing:` -- the plan decides (plan/checkpointing.h); the model's blocks and a measured training step on
// the first micro-batch reach it through the probe.
plan::PlanEntry plan_checkpointing(const config::Config& c, const hw::HardwareInfo& hw, const plan::Plan& p, torch::nn::Module& model,
                                   Trainer& trainer, const data::Dataset& train, std::int64_t micro_batch) {
  plan::CheckpointingRequest request;
  request.patterns = config::get_string_list(c, "checkpointing");
  request.memory_budget_gib = config::get_double(c, "memory_budget_gib");
  const bool is_auto = request.patterns.size() == 1 && request.patterns[0] == "auto";
  BELLOWS_CHECK_CONFIG(is_auto || std::find(request.patterns.begin(), request.patterns.end(), "auto") == request.patterns.end(),
                       fmt::format("checkpointing: 'auto' must stand alone, got [{}] ({})", fmt::join(request.patterns, ", "),
                                   c.origin("checkpointing").str()),
                       "write checkpointing: auto, or a list of block name patterns");
  auto* blocks = dynamic_cast<models::Checkpointable*>(&model);
  plan::CheckpointingProbe probe;
  if (blocks != nullptr) probe.blocks = blocks->checkpoint_blocks();
  probe.apply = [&](const std::vector<std::string>& patterns) { return models::apply_checkpointing(model, patterns); };
  probe.checkpoint_all = [&] { blocks->set_checkpointed(blocks->checkpoint_blocks()); };
  std::optional<data::Batch> batch;  // the first micro-batch's samples, fetched once
  probe.measure_step = [&]() -> std::optional<std::int64_t> {
    if (!batch) batch = probe_batch(train, micro_batch);
    return trainer.measure_step_memory(*batch);
  };
  return plan::plan_checkpointing(request, hw, p, probe);
}

// Online training has no data at the start: what a run decides from measured steps on its first batch, it takes from
// the config as it stands, saying so.
void plan_without_data(const config::Config& c, torch::nn::Module& model, std::vector<std::string>& notes) {
  const std::vector<std::string> patterns = config::get_string_list(c, "checkpointing");
  if (!patterns.empty() && !(patterns.size() == 1 && patterns[0] == "auto")) {
    models::apply_checkpointing(model, patterns);
  } else if (!patterns.empty()) {
    notes.push_back("checkpointing: auto measures a step on the first batch of a run; online training has no data at the start "
                    "and checkpoints no blocks (name them in checkpointing: to checkpoint some)");
  }
  if (config::is_word(c, "data.batch_size", "auto")) {
    notes.push_back(fmt::format("data.batch_size: auto measures steps on the first batch of a run; online training has no data at the start: "
                                "each batch of train.global_batch_size ({}) runs whole (out-of-memory recovery still splits it)",
                                config::get_int(c, "train.global_batch_size")));
  }
}

// log.flops: FLOP counting on, and the matmul peak of the plan's precision and device from the cached measured
// peaks (hw/peaks.h; measured now when none are cached and `may_measure`), into the trainer options; a line for
// the run's messages when peaks were measured or MFU cannot be reported.
void set_flop_options(const config::Config& c, const hw::HardwareInfo& hw, const plan::Plan& p, bool may_measure,
                      train::TrainerOptions& o, std::vector<std::string>& notes) {
  o.count_flops = config::get_bool(c, "log.flops");
  if (!o.count_flops) return;
  const hw::CachedPeaks peaks = hw::cached_peaks(hw, may_measure);
  if (peaks.measured_now) {
    notes.push_back(fmt::format("measured this machine's matmul and copy peaks for MFU in {:.1f} s, once: cached in {} "
                                "(`bellows hw --measure` measures again)", peaks.seconds, peaks.file.string()));
  }
  if (const auto peak = hw::matmul_peak(peaks.peaks, precision::find_precision(p.precision).matmul_peak, p.device.str())) {
    o.peak_flops_per_s = peak->flops_per_s;
    o.peak_name = fmt::format("{} on {}", peak->name, p.device.str());
  } else {
    notes.push_back(fmt::format("MFU not reported: no measured matmul peak for {} on {}{}", p.precision, p.device.str(),
                                peaks.peaks.empty() ? " (none cached; `bellows hw --measure` measures them once)" : ""));
  }
}

// resume: auto (the newest valid checkpoint of the run directory, if any; the ones skipped are reported) or a path.
// What only the built model can tell, before the trainer exists (a run with data): every dataset the run feeds it
// takes one evaluation step, so a misfit is named before the first training step, not at the first evaluation; and
// precision: auto's reduced precision on a CPU is kept only where a trial measured it faster for this model.
void trial_steps_of_the_model(const config::Config& c, AssembledRun& a, int world_size) {
  const data::DataSplits& splits = a.loaders->splits;
  const std::string val_path = config::get_string(c, "data.val_path");
  trial_evaluation(*a.model.module, *a.model.task,
                   {{splits.train.get(), fmt::format("the training data ({})", splits.train->name()), ErrorKind::kConfig},
                    {splits.val.get(),
                     splits.val == nullptr ? std::string()
                     : val_path.empty()    ? fmt::format("the validation split ({})", splits.val->name())
                                           : fmt::format("the validation data (data.val_path {}: {})", c.origin("data.val_path").str(), val_path),
                     ErrorKind::kData}});
  if (config::get_string(c, "precision") != "auto" || !a.plan.device.is_cpu() || a.plan.precision == "fp32" || world_size != 1 ||
      splits.train->size() == 0) {
    return;
  }
  const std::int64_t samples = config::is_word(c, "data.batch_size", "auto") ? 32 : loaded_batch_size(c);
  const PrecisionTrial trial = measure_precision_trial(*a.model.module, *a.model.task, probe_batch(*splits.train, samples), a.plan.precision);
  const auto rule = std::find_if(a.plan.entries.begin(), a.plan.entries.end(), [](const plan::PlanEntry& e) { return e.key == "precision"; });
  const auto [precision, reason] = precision_from_trial(trial, rule == a.plan.entries.end() ? std::string() : rule->reason);
  a.plan.revise({"precision", precision, reason});
}

std::optional<fs::path> checkpoint_to_resume(const config::Config& c, const fs::path& dir, Trainer& trainer, const std::string& otherwise) {
  const std::string resume = config::get_string(c, "resume");
  if (resume.empty()) return std::nullopt;
  if (resume != "auto") {
    config::check_path_exists(c, "resume", resume, ErrorKind::kData,
                              "give a checkpoint directory (step-XXXXXXXXX), its checkpoints/ directory or the run "
                              "directory");
    return ckpt::resolve_checkpoint(resume);
  }
  std::vector<std::string> skipped;
  std::optional<fs::path> from = ckpt::find_latest_valid(dir / "checkpoints", &skipped);
  for (const auto& s : skipped) trainer.message(fmt::format("warning: skipped checkpoint {}", s));
  if (!from) trainer.message(fmt::format("resume auto: no valid checkpoint in {}; {}", (dir / "checkpoints").string(), otherwise));
  return from;
}

// A run's resume: weights, trainer state, the data position and the RNG states of the checkpoint.
void resume_run(const config::Config& config_of_run, const fs::path& from, Trainer& trainer, data::BatchSource& train, int world_size, bool strict,
                const std::optional<plan::PlanEntry>& micro_batch, std::int64_t planned_split) {
  // Mapped, not read: each rank touches the tensors it loads (all weights, its own share of the optimizer state and EMA).
  const ckpt::Checkpoint cp = ckpt::load_checkpoint(from, /*mmap=*/true);
  // The data position of a job of another size or batch: the loader converts it (data/loader.h); whether the same
  // batches follow is said here.
  const auto saved_int = [&](const std::string& key) -> std::optional<std::int64_t> {
    for (const std::string prefix : {"data.", "rank.0.data."}) {  // the whole layout's, or rank 0's of a sharded one
      if (const auto it = cp.state.find(prefix + key); it != cp.state.end()) return it->second.item<std::int64_t>();
    }
    return std::nullopt;
  };
  const std::optional<std::int64_t> world = saved_int("sampler.world_size"), batch = saved_int("batch_size");
  const std::int64_t this_batch = loaded_batch_size(config_of_run, world_size);
  if (world && batch && (*world != world_size || *batch != this_batch)) {
    const bool same_global = *world * *batch == world_size * this_batch;
    trainer.message(fmt::format("{}the checkpoint was written by {} process(es) of batch {}, this run has {} of batch {}: {}", same_global ? "" : "warning: ",
                                *world, *batch, world_size, this_batch,
                                same_global ? "the same global batch, so the same batches follow"
                                            : "training continues from the same step and (rounded down to a whole batch) the same "
                                              "fraction of the epoch, but the batches differ from the original run's"));
  }
  try {
    trainer.restore(cp, &train, strict);
  } catch (const Error& e) {  // which checkpoint did not fit: resume=auto chose it for the user
    throw Error(e.kind(), fmt::format("resuming from {}: {}", from.string(), e.message()), e.hint());
  }
  trainer.message(fmt::format("resumed from {} (step {}, epoch {})", from.string(), cp.step, cp.epoch));
  if (micro_batch && trainer.micro_split() != planned_split) {
    trainer.message(fmt::format("note: each loaded batch runs as {} micro-batches, as in the checkpoint (the finder chose {})",
                                trainer.micro_split(), micro_batch->value));
  }
}

}  // namespace

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

AssembledRun assemble_run(const config::Config& given, const AssemblyOptions& o) {
  config::Config c = given;  // the data may fill in the model's input width (take_input_width_from_data)
  AssembledRun a;
  // --- plan: hardware facts + requested settings -> concrete settings with reasons ---
  const hw::HardwareInfo& hw = hw::HardwareInfo::get();
  // Online training is one process, whatever launcher started the host program (its ranks are the host's business).
  const dist::ProcessInfo process = o.online ? dist::ProcessInfo{} : process_info(c);
  plan::PlanRequest request = plan_request(c);
  request.local_rank = process.local_rank;
  request.local_world_size = process.local_world_size;
  request.share_node_cores = process.shares_node_cores();
  request.cores_per_process = process.cpus_per_process;
  a.plan = plan::resolve(request, hw);
  a.plan.entries.insert(a.plan.entries.begin(), profile_plan_entry(c, hw));  // which hardware profile, and why
  for (std::size_t i = 0; i < c.plan_notes().size(); ++i) {  // a tuned plan's settings, after the profile's row
    const auto& n = c.plan_notes()[i];
    a.plan.entries.insert(a.plan.entries.begin() + static_cast<std::ptrdiff_t>(1 + i), {n.key, n.value, n.reason});
  }
  plan::apply(a.plan);  // online: on its compute thread (the thread count is per thread; the rest is process-wide)

  // --- the job's processes meet first (a missing rank or a different config fails here, within dist.timeout_s) ---
  if (o.online) {
    const std::string name = config::get_string(c, "dist.strategy");
    BELLOWS_CHECK_CONFIG(name == "auto" || !dist::find_strategy(name).several_processes,
                         fmt::format("online training runs in the calling process alone, but dist.strategy is {}", name),
                         "set dist.strategy: auto or single");
    a.strategy = std::make_shared<dist::SingleDevice>();
  }
  bool strategy_by_memory = false;
  if (!o.online) {
    StrategySetup strategy = make_strategy(c, process, a.plan);
    strategy_by_memory = strategy.by_memory;
    a.strategy = strategy.strategy;
    a.strategy_described = a.strategy->describe();
    a.plan.entries.push_back(strategy.entry);
    obs::install_cpu_tracking();  // tensor memory on the CPU is counted from here on (obs/memory.h)
    a.cpu_limit = std::make_unique<obs::CpuTensorLimit>(static_cast<std::int64_t>(config::get_double(c, "cpu_tensor_limit_mb") * 1e6));
  }
  // Where dist.strategy: auto moves to zero2 or fsdp (below, once the model is built) these ranks are the same job.
  dist::Strategy* ranks = a.strategy.get();
  models::set_dropout_masks(dropout_masks_setting(c));
  torch::manual_seed(static_cast<std::uint64_t>(config::get_int(c, "seed")));  // the same seed on every rank
  std::vector<std::string> notes;  // messages from before the sinks exist; they reach every sink once they do

  // --- data: datasets, samplers, prefetching loaders on the planned device (online: the sessions' own) ---
  if (!o.online) {
    a.loaders = make_loaders(c, a.plan, o.stream, ranks->rank(), ranks->world_size());
    a.plan.revise(a.loaders->plan_rows);  // what the data decided (the workers, from a measured batch)
    if (auto row = take_input_width_from_data(c, *a.loaders->splits.train)) a.plan.entries.push_back(*row);
    check_data_against_model(c, *a.loaders->splits.train);
  }

  // --- model, its weights ---
  const models::ModelContext context = o.online ? model_context_without_data(c) : model_context(a.loaders->splits);
  a.model = build_model(c, context, &notes);
  for (const auto& row : a.model.plan_rows) a.plan.entries.push_back({row.key, row.value, row.reason});  // what the model chose
  if (const auto& entry = models::find_model(config::get_string(c, "model.name")); entry.forward_flops && config::get_bool(c, "log.flops") && !o.online) {
    if (const std::optional<double> f = entry.forward_flops(c, context)) {
      notes.push_back(fmt::format("model FLOPs, analytic per layer (models/flops.h): {:.4g} GFLOP per sample forward, about {:.4g} "
                                  "for a training step (3x){}", *f / 1e9, 3 * *f / 1e9,
                                  entry.forward_flops_basis.empty() ? "" : "; " + entry.forward_flops_basis));
    }
  }
  if (const std::string init = config::get_string(c, "init_weights"); !init.empty()) {
    config::check_path_exists(c, "init_weights", init, ErrorKind::kData,
                              "give a safetensors file of the model's weights (bellows ckpt export writes one)");
    // Pretrained weights (e.g. a frozen encoder, seed 004), by name; a resumed checkpoint overrides them.
    const models::WeightImport w{init, "", config::get_bool(c, "init_weights_strict"), "model", "init_weights_strict"};
    notes.push_back(import_note(w, import_weights(*a.model.module, w)));
  }
  if (o.online) plan_without_data(c, *a.model.module, notes);
  if (!o.online) trial_steps_of_the_model(c, a, ranks->world_size());

  // --- run directory: rank 0 picks it (and alone writes into it); the others learn its name ---
  a.run_dir = broadcast_text(*ranks, ranks->is_main() ? make_run_dir(c).string() : std::string());

  // --- the trainer ---
  train::TrainerOptions t = trainer_options(c, a.plan);
  if (!o.online) a.plan.entries.push_back(length_entry(t, a.loaders->train->batches_per_epoch()));
  t.stop_flag = o.stop_flag;
  t.strategy = a.strategy;
  t.checkpoint = checkpoint_options(c, a.run_dir);
  a.plan.revise(checkpoint_layout_entry(c, dist::find_strategy(a.strategy->name()), t.checkpoint));
  if (o.online) {
    t.sessions = true;
    if (t.checkpoint.dir.empty()) {  // checkpoint.enabled: false: none by itself, but save() still writes one
      t.checkpoint.dir = a.run_dir / "checkpoints";
      t.checkpoint.every_n_steps = 0;
      t.checkpoint.every_n_minutes = 0;
      t.checkpoint.at_end = false;
    }
    t.checkpoint.on_stop = false;  // a stop is the program leaving (destroy): no checkpoint it did not ask for
    if (config::get_string(c, "compile") == "cuda_graph") {  // asked for by name (auto, the default, just runs eagerly here)
      notes.push_back(fmt::format("compile: cuda_graph: steps run eagerly: {}", train::step_graph_unfit({.cuda = true, .sessions = true})));
    }
  } else {
    t.profile = profile_options(c, a.run_dir);
    a.plan.entries.push_back(resolve_compile(c, t, ranks->world_size()));
  }
  // Several ranks measuring at once would measure each other: they use the cache, or report no MFU.
  set_flop_options(c, hw, a.plan, /*may_measure=*/ranks->world_size() == 1, t, notes);
  // The run's GPU memory limit, after the machine's peaks were measured (their 256 MiB operands are the machine's
  // measurement, not the run's; measured under a small limit they failed on the H200) and before the run's model,
  // batch-size trials and steps allocate there.
  if (const double mb = config::get_double(c, "gpu_memory_limit_mb"); mb > 0) {
    obs::limit_device_memory(a.plan.device, static_cast<std::int64_t>(mb * 1e6));
  }
  t.checkpoint_info = {{"config", c.to_yaml()}, {"plan", nlohmann::json::parse(a.plan.to_json())}};
  a.trainer = std::make_unique<Trainer>(a.model.module, a.model.task, t);
  if (strategy_by_memory) {  // dist.strategy: auto on several processes: by memory, measured with a trainer under ddp
    auto [row, chosen] = plan_strategy(c, hw, a.plan, process, a.strategy, *a.model.module, *a.trainer, *a.loaders->splits.train);
    for (plan::PlanEntry& e : a.plan.entries) {
      if (e.key == "strategy") e = {"strategy", row.value, e.reason + "; " + row.reason};
    }
    if (chosen) {  // the trainer again, under the strategy chosen (on the same process group)
      a.trainer.reset();
      redescribe_strategy(a.plan, a.strategy_described, chosen->describe());
      a.strategy = t.strategy = chosen;
      a.plan.revise(checkpoint_layout_entry(c, dist::find_strategy(chosen->name()), t.checkpoint));
      ranks = a.strategy.get();
      a.strategy_described = chosen->describe();
      t.checkpoint_info["plan"] = nlohmann::json::parse(a.plan.to_json());  // the checkpoints' manifests name the choice
      a.trainer = std::make_unique<Trainer>(a.model.module, a.model.task, t);
    }
  }
  Trainer& trainer = *a.trainer;
  // A sharded strategy's describe() names each rank's share once the trainer has given it its parameters.
  redescribe_strategy(a.plan, a.strategy_described, ranks->describe());
  // The rows decided on measured steps of the model (a run's first batch): the micro-batch, activation checkpointing.
  std::optional<plan::PlanEntry> micro_batch;
  std::int64_t planned_split = 1;
  if (!o.online) {
    const data::Dataset& first = *a.loaders->splits.train;
    if (config::is_word(c, "data.batch_size", "auto")) micro_batch = plan_micro_batch(c, hw, a.plan, trainer, first, *ranks);
    planned_split = trainer.micro_split();
    const std::int64_t micro_samples = (loaded_batch_size(c, ranks->world_size()) + planned_split - 1) / planned_split;
    const plan::PlanEntry checkpointing = plan_checkpointing(c, hw, a.plan, *a.model.module, trainer, first, micro_samples);
    if (micro_batch) a.plan.entries.push_back(*micro_batch);
    a.plan.entries.push_back(checkpointing);
  }

  // --- what the run directory records, and the sinks: rank 0's (records are global: the trainer sums over ranks) ---
  if (ranks->is_main()) {
    write_file_atomically(a.run_dir / "config.resolved.yaml", c.to_yaml());  // a resumed run rewrites them
    write_file_atomically(a.run_dir / "plan.json", a.plan.to_json());
    // Rows decided while training (compile: auto's measured choice) rewrite it: a copy of the plan, as the run left it.
    trainer.set_plan_revision([written = std::make_shared<plan::Plan>(a.plan), path = a.run_dir / "plan.json"](
                                  const std::string& key, const std::string& value, const std::string& reason) {
      written->revise({key, value, reason});
      write_file_atomically(path, written->to_json());
    });
    // The numbers a categorical CSV column's values became (docs/data.md): what `predict` inputs must use.
    if (a.loaders && !a.loaders->splits.facts.categories.empty()) {
      write_file_atomically(a.run_dir / "categories.json", nlohmann::json(a.loaders->splits.facts.categories).dump(2) + "\n");
    }
  }
  trainer.set_run_info(config::get_string(c, "name"), a.run_dir.string());
  trainer.set_header(header_rows(hw, a.plan));
  if (ranks->is_main()) {
    const obs::SinkContext where{a.run_dir, o.console, o.tty};
    for (const obs::SinkEntry& entry : obs::sink_entries()) {  // the registered sinks the config turns on
      if (!entry.key.empty() && !config::get_bool(c, entry.key)) continue;
      if (std::shared_ptr<obs::Sink> sink = entry.make(where)) trainer.add_sink(std::move(sink));
    }
    for (const auto& sink : o.sinks) trainer.add_sink(sink);
  }
  for (const auto& note : notes) trainer.message(note);

  // --- resume: the newest valid checkpoint of this run (auto) or the one named ---
  if (o.online) {
    a.resume_from = checkpoint_to_resume(c, a.run_dir, trainer, "starting untrained");
  } else if (const auto from = checkpoint_to_resume(c, a.run_dir, trainer, "starting from the beginning")) {
    resume_run(c, *from, trainer, *a.loaders->train, ranks->world_size(), config::get_bool(c, "checkpoint.strict"), micro_batch, planned_split);
  }
  return a;
}

}  // namespace bellows::app
