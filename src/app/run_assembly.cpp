// One assembly of a run; see run_assembly.h.
#include "run_assembly.h"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <torch/utils.h>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <optional>

#include "bellows/app/data_setup.h"
#include "bellows/app/model_setup.h"
#include "bellows/app/precision_trial.h"
#include "bellows/app/profiles.h"
#include "bellows/app/run.h"
#include "bellows/app/run_settings.h"
#include "bellows/app/strategy_setup.h"
#include "bellows/app/trainer_setup.h"
#include "bellows/ckpt/checkpoint.h"
#include "bellows/ckpt/inspect.h"
#include "bellows/config/paths.h"  // defines: check_path_exists
#include "bellows/data/build.h"
#include "bellows/dist/registry.h"
#include "bellows/hw/hardware_info.h"
#include "bellows/hw/peaks.h"
#include "bellows/precision/registry.h"
#include "bellows/models/activation_checkpoint.h"
#include "bellows/models/dropout.h"
#include "bellows/plan/batch_size.h"
#include "bellows/plan/checkpointing.h"
#include "bellows/train/step_graph.h"
#include "bellows/util/atomic_file.h"
#include "bellows/util/check.h"
#include "bellows/util/exception_report.h"
#include "step_probe.h"  // defines: probe_batch

namespace bellows::app {
namespace fs = std::filesystem;
using train::Trainer;

namespace {

// `data.batch_size: auto` -- the finder decides (plan/batch_size.h) from measured steps on the first samples; the
// loaded batch (train.global_batch_size / ranks) then runs as that many micro-batches. Rank 0's choice is every
// rank's.
plan::PlanEntry plan_micro_batch(const config::Config& c, const RunSettings& run, const hw::HardwareInfo& hw, const plan::Plan& p, Trainer& trainer,
                                 const data::Dataset& train, dist::Strategy& ranks) {
  plan::MicroBatchRequest request;
  request.loaded_batch = std::min(loaded_batch_size(c, ranks.world_size()), train.size());
  request.memory_budget_gib = run.memory_budget_gib;
  const obs::MemoryStats mem = obs::memory_stats(p.device);
  request.held_bytes = mem.tracked ? mem.current_bytes : 0;
  if (p.device.is_cpu()) request.limit_bytes = obs::cpu_tensor_limit();  // an emulated smaller machine
  if (p.device.is_cuda()) request.limit_bytes = static_cast<std::int64_t>(run.gpu_memory_limit_mb * 1e6);
  // Not in a probe step: the optimizer's state (Adam: two tensors per parameter; SGD with momentum: one) and EMA's copy.
  // Under zero1 and zero2 the optimizer holds this rank's share.
  std::int64_t param_bytes = 0, shard_bytes = 0;
  for (const auto& t : trainer.trainable()) param_bytes += t.numel() * t.element_size();
  for (const auto& t : trainer.optimizer().parameters()) shard_bytes += t.numel() * t.element_size();
  const int states = optimizer_states(c);
  const int copies = states + (trainer_settings(c).ema.has_value() ? 1 : 0);
  request.later_bytes = shard_bytes * states + param_bytes * (copies - states);
  // On the CPU a checkpoint's host copy of the weights and that state is tensor memory too, while training goes on.
  if (p.device.is_cpu() && checkpoint_settings(c).enabled) request.later_bytes += param_bytes * (1 + copies);
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

// `checkpointing:` -- the plan decides (plan/checkpointing.h); the model's blocks and a measured training step on
// the first micro-batch reach it through the probe.
plan::PlanEntry plan_checkpointing(const config::Config& c, const RunSettings& run, const hw::HardwareInfo& hw, const plan::Plan& p, torch::nn::Module& model,
                                   Trainer& trainer, const data::Dataset& train, std::int64_t micro_batch) {
  plan::CheckpointingRequest request;
  request.patterns = run.checkpointing;
  request.memory_budget_gib = run.memory_budget_gib;
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
void plan_without_data(const config::Config& c, const RunSettings& run, torch::nn::Module& model, std::vector<std::string>& notes) {
  const std::vector<std::string>& patterns = run.checkpointing;
  if (!patterns.empty() && !(patterns.size() == 1 && patterns[0] == "auto")) {
    models::apply_checkpointing(model, patterns);
  } else if (!patterns.empty()) {
    notes.push_back("checkpointing: auto measures a step on the first batch of a run; online training has no data at the start "
                    "and checkpoints no blocks (name them in checkpointing: to checkpoint some)");
  }
  if (loader_settings(c).batch_auto) {
    notes.push_back(fmt::format("data.batch_size: auto measures steps on the first batch of a run; online training has no data at the start: "
                                "each batch of train.global_batch_size ({}) runs whole (out-of-memory recovery still splits it)",
                                run.global_batch_size));
  }
}

// log.flops: FLOP counting on, and the matmul peak of the plan's precision and device from the cached measured
// peaks (hw/peaks.h; measured now when none are cached and `may_measure`), into the trainer options; a line for
// the run's messages when peaks were measured or MFU cannot be reported.
void set_flop_options(const RunSettings& run, const hw::HardwareInfo& hw, const plan::Plan& p, bool may_measure,
                      train::TrainerOptions& o, std::vector<std::string>& notes) {
  o.count_flops = run.log_flops;
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
  const std::string val_path = data::data_options(c).val_path.string();
  trial_evaluation(*a.model.module, *a.model.task,
                   {{splits.train.get(), fmt::format("the training data ({})", splits.train->name()), ErrorKind::kConfig},
                    {splits.val.get(),
                     splits.val == nullptr ? std::string()
                     : val_path.empty()    ? fmt::format("the validation split ({})", splits.val->name())
                                           : fmt::format("the validation data (data.val_path {}: {})", c.origin("data.val_path").str(), val_path),
                     ErrorKind::kData}});
  if (plan_request(c).precision != "auto" || !a.plan.device.is_cpu() || a.plan.precision == "fp32" || world_size != 1 ||
      splits.train->size() == 0) {
    return;
  }
  const std::int64_t samples = loader_settings(c).batch_auto ? 32 : loaded_batch_size(c);
  const PrecisionTrial trial = measure_precision_trial(*a.model.module, *a.model.task, probe_batch(*splits.train, samples), a.plan.precision);
  const auto rule = std::find_if(a.plan.entries.begin(), a.plan.entries.end(), [](const plan::PlanEntry& e) { return e.key == "precision"; });
  const auto [precision, reason] = precision_from_trial(trial, rule == a.plan.entries.end() ? std::string() : rule->reason);
  a.plan.revise({"precision", precision, reason});
}

std::optional<fs::path> checkpoint_to_resume(const config::Config& c, const RunSettings& run, const fs::path& dir, Trainer& trainer,
                                             const std::string& otherwise) {
  const std::string& resume = run.resume;
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

// --- the stages of an assembly: the two kinds share the common ones (the plan, the seed, the model, the run
// directory, the measurements' settings, the checkpoint layout, the trainer, the records and sinks), each in its own
// list below ---
namespace {

// What the stages share while a run is assembled.
struct Assembly {
  explicit Assembly(const config::Config& config) : c(config), settings(run_settings(config)) {}
  config::Config c;  // the data may fill in the model's input width (take_input_width_from_data)
  const RunSettings settings;  // the run's own keys, read once (the data changes none of them)
  const hw::HardwareInfo& hw = hw::HardwareInfo::get();
  dist::ProcessInfo process;  // online training: one process, whatever launched the program
  AssembledRun run;
  StrategySetup strategy;  // the strategy and why (its plan row is written once the trainer has sharded)
  std::optional<std::size_t> strategy_row_at;  // where the "strategy" row goes among the plan's rows (a run's)
  train::TrainerOptions t;
  std::vector<std::string> notes;  // messages from before the sinks exist; they reach every sink once they do
};

// --- common stages ---

// The plan: hardware facts + requested settings -> concrete settings with reasons, applied (online: on its compute
// thread; the thread count is per thread, the rest process-wide).
void resolve_the_plan(Assembly& s) {
  plan::PlanRequest request = plan_request(s.c);
  request.local_rank = s.process.local_rank;
  request.local_world_size = s.process.local_world_size;
  request.share_node_cores = s.process.shares_node_cores();
  request.cores_per_process = s.process.cpus_per_process;
  plan::Plan& p = s.run.plan;
  p = plan::resolve(request, s.hw);
  p.entries.insert(p.entries.begin(), profile_plan_entry(s.c, s.hw));  // which hardware profile, and why
  for (std::size_t i = 0; i < s.c.plan_notes().size(); ++i) {        // a tuned plan's settings, after the profile's row
    const auto& n = s.c.plan_notes()[i];
    p.entries.insert(p.entries.begin() + static_cast<std::ptrdiff_t>(1 + i), {n.key, n.value, n.reason});
  }
  plan::apply(p);
}

// Dropout's masks and the seed: the same on every rank.
void seed_the_run(const Assembly& s) {
  models::set_dropout_masks(dropout_masks_setting(s.c));
  torch::manual_seed(static_cast<std::uint64_t>(s.settings.seed));
}

// The model, and the rows it chose.
void build_the_model(Assembly& s, const models::ModelContext& context) {
  s.run.model = build_model(s.c, context, &s.notes);
  for (const auto& row : s.run.model.plan_rows) s.run.plan.entries.push_back({row.key, row.value, row.reason});
}

// init_weights: pretrained weights by name (e.g. a frozen encoder, seed 004); a resumed checkpoint overrides them.
void import_the_weights(Assembly& s) {
  if (const std::string init = s.settings.init_weights; !init.empty()) {
    config::check_path_exists(s.c, "init_weights", init, ErrorKind::kData,
                              "give a safetensors file of the model's weights (bellows ckpt export writes one)");
    const models::WeightImport w{init, "", s.settings.init_weights_strict, "model", "init_weights_strict"};
    s.notes.push_back(import_note(w, import_weights(*s.run.model.module, w)));
  }
}

// The run directory: rank 0 picks it (and alone writes into it); the others learn its name.
void make_the_run_directory(Assembly& s) {
  dist::Strategy& ranks = *s.run.strategy;
  s.run.run_dir = broadcast_text(ranks, ranks.is_main() ? make_run_dir(s.settings).string() : std::string());
}

// What measures the run: FLOP counting and the matmul peak (several ranks measuring at once would measure each other:
// they use the cache, or report no MFU), then the run's GPU memory limit, after the machine's peaks were measured
// (their 256 MiB operands are the machine's measurement, not the run's; measured under a small limit they failed on
// the H200) and before the run's probe steps, batch-size trials and steps allocate there.
void set_up_measurement(Assembly& s) {
  set_flop_options(s.settings, s.hw, s.run.plan, /*may_measure=*/s.run.strategy->world_size() == 1, s.t, s.notes);
  if (const double mb = s.settings.gpu_memory_limit_mb; mb > 0) {
    obs::limit_device_memory(s.run.plan.device, static_cast<std::int64_t>(mb * 1e6));
  }
}

// checkpoint.layout for the strategy as final: its row.
void settle_the_checkpoint_layout(Assembly& s) {
  s.run.plan.revise(checkpoint_layout_entry(s.c, dist::find_strategy(s.run.strategy->name()), s.t.checkpoint));
}

// The plan with the "strategy" row at its place (a run's; online training has none), as the strategy describes itself now.
plan::Plan plan_with_strategy_row(const Assembly& s) {
  plan::Plan p = s.run.plan;
  if (s.strategy_row_at) p.entries.insert(p.entries.begin() + static_cast<std::ptrdiff_t>(*s.strategy_row_at), strategy_row(s.strategy));
  return p;
}

// The trainer, and then the strategy's plan row: a sharding strategy knows its shares once the trainer has given it the
// parameters. The checkpoints' manifests keep the plan as it was when the trainer was built.
void build_the_trainer(Assembly& s) {
  s.t.strategy = s.run.strategy;
  s.t.checkpoint_info = {{"config", s.c.to_yaml()}, {"plan", nlohmann::json::parse(plan_with_strategy_row(s).to_json())}};
  s.run.trainer = std::make_unique<Trainer>(s.run.model.module, s.run.model.task, s.t);
  s.run.plan = plan_with_strategy_row(s);
}

// What the run directory records (rank 0's: records are global, the trainer sums over ranks), the header, the sinks,
// and the messages from before them.
void record_the_run(Assembly& s, const RunOptions& o) {
  AssembledRun& a = s.run;
  Trainer& trainer = *a.trainer;
  const bool main = a.strategy->is_main();
  if (main) {
    write_file_atomically(a.run_dir / "config.resolved.yaml", s.c.to_yaml());  // a resumed run rewrites them
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
  trainer.set_run_info(s.settings.name, a.run_dir.string());
  trainer.set_header(header_rows(s.hw, a.plan));
  if (main) {
    const obs::SinkContext where{a.run_dir, o.console, o.tty, o.console_sessions_only};
    for (const obs::SinkEntry& entry : obs::sink_entries()) {  // the registered sinks the config turns on
      if (!s.settings.sink_on(entry.key)) continue;
      if (std::shared_ptr<obs::Sink> sink = entry.make(where)) trainer.add_sink(std::move(sink));
    }
    for (const auto& sink : o.sinks) trainer.add_sink(sink);
  }
  for (const auto& note : s.notes) trainer.message(note);
}

// --- a run's own stages ---

// The job's processes meet first (a missing rank or a different config fails here, within dist.timeout_s); CPU memory
// counting starts, under the run's cpu_tensor_limit_mb.
void join_the_job(Assembly& s) {
  s.strategy = make_strategy(s.c, s.process, s.run.plan);
  s.run.strategy = s.strategy.strategy;
  s.strategy_row_at = s.run.plan.entries.size();  // after the plan's rows; written once the trainer is built
  obs::install_cpu_tracking();  // tensor memory on the CPU is counted from here on (obs/memory.h)
  s.run.cpu_limit = std::make_unique<obs::CpuTensorLimit>(static_cast<std::int64_t>(s.settings.cpu_tensor_limit_mb * 1e6));
}

// Datasets, samplers, prefetching loaders on the planned device, and what the data decided.
void load_the_data(Assembly& s, const std::shared_ptr<data::StreamBuffer>& stream) {
  AssembledRun& a = s.run;
  a.loaders = make_loaders(s.c, a.plan, stream, a.strategy->rank(), a.strategy->world_size());
  a.plan.revise(a.loaders->plan_rows);  // the workers, from a measured batch
  if (auto row = take_input_width_from_data(s.c, *a.loaders->splits.train)) a.plan.entries.push_back(*row);
  check_data_against_model(s.c, *a.loaders->splits.train);
}

// log.flops: the model's analytic FLOPs, where its entry counts them.
void note_the_model_flops(Assembly& s, const models::ModelContext& context) {
  const auto& entry = models::find_model(s.settings.model_name);
  if (!entry.forward_flops || !s.settings.log_flops) return;
  if (const std::optional<double> f = entry.forward_flops(s.c, context)) {
    s.notes.push_back(fmt::format("model FLOPs, analytic per layer (models/flops.h): {:.4g} GFLOP per sample forward, about {:.4g} "
                                  "for a training step (3x){}", *f / 1e9, 3 * *f / 1e9,
                                  entry.forward_flops_basis.empty() ? "" : "; " + entry.forward_flops_basis));
  }
}

// The trainer's options of a run: its length row, the stop flag, the checkpoints and the profiler.
void trainer_options_of_a_run(Assembly& s, const RunOptions& o) {
  s.t = trainer_options(s.c, s.run.plan);
  s.run.plan.entries.push_back(length_entry(s.t, s.run.loaders->train->batches_per_epoch()));
  s.t.stop_flag = o.stop_flag;
  s.t.checkpoint = checkpoint_options(s.c, s.run.run_dir);
  s.t.profile = profile_options(s.c, s.run.run_dir);
}

// dist.strategy: auto on several processes: by memory, from probe steps of the model (strategy_setup.h), before the
// trainer that trains is built.
void choose_the_strategy(Assembly& s) {
  if (!s.strategy.by_memory) return;
  AssembledRun& a = s.run;
  choose_by_memory(s.strategy, s.c, s.hw, a.plan, s.process, *a.model.module, *a.model.task, s.t, *a.loaders->splits.train);
  a.strategy = s.strategy.strategy;
}

// The rows decided on measured steps of the model (a run's first batch): the micro-batch, activation checkpointing.
// Returns the micro-batch's row (data.batch_size: auto) for the resume's note.
std::optional<plan::PlanEntry> plan_on_measured_steps(Assembly& s) {
  AssembledRun& a = s.run;
  Trainer& trainer = *a.trainer;
  dist::Strategy& ranks = *a.strategy;
  const data::Dataset& first = *a.loaders->splits.train;
  std::optional<plan::PlanEntry> micro_batch;
  if (loader_settings(s.c).batch_auto) micro_batch = plan_micro_batch(s.c, s.settings, s.hw, a.plan, trainer, first, ranks);
  const std::int64_t split = trainer.micro_split();
  const std::int64_t micro_samples = (loaded_batch_size(s.c, ranks.world_size()) + split - 1) / split;
  const plan::PlanEntry checkpointing = plan_checkpointing(s.c, s.settings, s.hw, a.plan, *a.model.module, trainer, first, micro_samples);
  if (micro_batch) a.plan.entries.push_back(*micro_batch);
  a.plan.entries.push_back(checkpointing);
  return micro_batch;
}

// --- online training's own stages ---

// The calling process alone, whatever launched the program, or the job of training processes the program set up
// (RunOptions::job): they meet here as a run's processes do (within dist.timeout_s; ranks whose configs differ stop).
// dist.strategy: auto joins as a run's would; online training has no data at the start to probe, so it stays there.
void join_the_program_job(Assembly& s, const RunOptions& o) {
  const std::string name = s.settings.strategy;
  // A job of one rank trains alone unless a strategy of several processes is asked for by name (a process group of
  // one, as `bellows launch -n 1`: the GPU check's NCCL path on one GPU).
  const bool joins = o.job != nullptr && (o.job->world_size > 1 || (name != "auto" && dist::find_strategy(name).several_processes));
  if (!joins) {
    BELLOWS_CHECK_CONFIG(name == "auto" || !dist::find_strategy(name).several_processes,
                         fmt::format("online training runs in the calling process alone, but dist.strategy is {} ({})", name,
                                     s.c.origin("dist.strategy").str()),
                         "set dist.strategy: auto or single, or create the trainer in a job of training ranks (bellows_create_mpi, "
                         "bellows_create_job)");
    s.run.strategy = std::make_shared<dist::SingleDevice>();
    s.strategy.strategy = s.run.strategy;
    const dist::ProcessInfo launched = dist::detect_process();
    if (o.job == nullptr && launched.distributed()) {
      s.notes.push_back(fmt::format("warning: this process is rank {} of {} started by {} ({}), but it trains alone, as every other rank "
                                    "does: bellows_create trains in the calling process; to train one model across the ranks create the "
                                    "trainer with bellows_create_mpi (or bellows_create_job) on every rank",
                                    launched.rank, launched.world_size, launched.launcher, launched.reason));
    }
    return;
  }
  s.strategy = make_strategy(s.c, *o.job, s.run.plan);
  s.run.strategy = s.strategy.strategy;
  if (s.strategy.by_memory) {
    s.strategy.by_memory = false;
    s.strategy.why += "; dist.strategy: auto: online training has no data at the start to measure a step on, so the ranks train as they met";
  }
  s.strategy_row_at = s.run.plan.entries.size();  // after the plan's rows; written once the trainer is built
}

// Every rank of a job holds the whole model between steps: predictions run on any rank at any time.
void check_whole_model_between_steps(Assembly& s) {
  train::Trainer& trainer = *s.run.trainer;
  std::vector<at::Tensor> params;
  for (const auto& p : s.run.model.module->parameters()) params.push_back(p);
  const std::vector<bool> held = trainer.strategy().held_between_steps(params);
  BELLOWS_CHECK_CONFIG(std::all_of(held.begin(), held.end(), [](bool h) { return h; }),
                       fmt::format("online training across ranks predicts on any rank between sessions, but dist.strategy {} releases the "
                                   "weights other ranks own between steps",
                                   trainer.strategy().name()),
                       "use a strategy that keeps the whole model on every rank (dist.strategy: auto, ddp, zero1 or zero2)");
}

// The trainer's options of sessions: checkpoints only when asked for, none on a stop, steps eagerly.
void trainer_options_of_sessions(Assembly& s, const RunOptions& o) {
  train::TrainerOptions& t = s.t;
  t = trainer_options(s.c, s.run.plan);
  t.stop_flag = o.stop_flag;
  t.checkpoint = checkpoint_options(s.c, s.run.run_dir);
  t.sessions = true;
  if (t.checkpoint.dir.empty()) {  // checkpoint.enabled: false: none by itself, but save() still writes one
    t.checkpoint.dir = s.run.run_dir / "checkpoints";
    t.checkpoint.every_n_steps = 0;
    t.checkpoint.every_n_minutes = 0;
    t.checkpoint.at_end = false;
  }
  t.checkpoint.on_stop = false;  // a stop is the program leaving (destroy): no checkpoint it did not ask for
  if (s.settings.compile == "cuda_graph") {  // asked for by name (auto, the default, just runs eagerly here)
    s.notes.push_back(fmt::format("compile: cuda_graph: steps run eagerly: {}", train::step_graph_unfit({.cuda = true, .sessions = true})));
  }
}

}  // namespace

AssembledRun assemble_run(const config::Config& config, const RunOptions& o) {
  Assembly s{config};
  s.process = process_info(s.c);
  resolve_the_plan(s);
  join_the_job(s);
  seed_the_run(s);
  load_the_data(s, o.stream);
  const models::ModelContext context = model_context(s.c, s.run.loaders->splits);
  build_the_model(s, context);
  note_the_model_flops(s, context);
  import_the_weights(s);
  trial_steps_of_the_model(s.c, s.run, s.run.strategy->world_size());
  make_the_run_directory(s);
  trainer_options_of_a_run(s, o);
  set_up_measurement(s);
  choose_the_strategy(s);
  settle_the_checkpoint_layout(s);
  s.run.plan.entries.push_back(resolve_compile(s.settings, s.t, s.run.strategy->world_size()));
  build_the_trainer(s);
  const std::optional<plan::PlanEntry> micro_batch = plan_on_measured_steps(s);
  const std::int64_t planned_split = s.run.trainer->micro_split();
  record_the_run(s, o);
  // --- resume: the newest valid checkpoint of this run (auto) or the one named ---
  Trainer& trainer = *s.run.trainer;
  if (const auto from = checkpoint_to_resume(s.c, s.settings, s.run.run_dir, trainer, "starting from the beginning")) {
    resume_run(s.c, *from, trainer, *s.run.loaders->train, s.run.strategy->world_size(), s.settings.checkpoint_strict, micro_batch,
               planned_split);
  }
  return std::move(s.run);
}

AssembledRun assemble_online(const config::Config& config, const RunOptions& o) {
  Assembly s{config};
  if (o.job != nullptr) s.process = *o.job;
  resolve_the_plan(s);
  join_the_program_job(s, o);
  seed_the_run(s);
  build_the_model(s, model_context_without_data(s.c));
  import_the_weights(s);
  plan_without_data(s.c, s.settings, *s.run.model.module, s.notes);
  make_the_run_directory(s);
  trainer_options_of_sessions(s, o);
  set_up_measurement(s);
  settle_the_checkpoint_layout(s);
  build_the_trainer(s);
  check_whole_model_between_steps(s);
  record_the_run(s, o);
  s.run.resume_from = checkpoint_to_resume(s.c, s.settings, s.run.run_dir, *s.run.trainer, "starting untrained");  // restored by the caller
  return std::move(s.run);
}

}  // namespace bellows::app
