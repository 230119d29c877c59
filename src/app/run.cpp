// Config-driven training runs; see run.h.
#include "bellows/app/run.h"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <torch/utils.h>

#include <nlohmann/json.hpp>

#include "bellows/app/data_setup.h"
#include "bellows/app/model_setup.h"
#include "bellows/app/profiles.h"
#include "run_parts.h"
#include "bellows/app/strategy_setup.h"
#include "bellows/app/trainer_setup.h"
#include "bellows/ckpt/checkpoint.h"
#include "bellows/ckpt/inspect.h"
#include "bellows/hw/hardware_info.h"
#include "bellows/hw/peaks.h"
#include "bellows/models/activation_checkpoint.h"
#include "bellows/models/dropout.h"
#include "bellows/obs/console_sink.h"
#include "bellows/obs/jsonl_sink.h"
#include "bellows/obs/tensorboard_sink.h"
#include "bellows/obs/memory.h"
#include "bellows/plan/batch_size.h"
#include "bellows/plan/checkpointing.h"
#include "bellows/plan/plan.h"
#include "bellows/train/trainer.h"
#include "bellows/util/atomic_file.h"
#include "bellows/util/check.h"

namespace bellows::app {
namespace fs = std::filesystem;
using train::Trainer;
using train::TrainerOptions;

namespace {

// The first `samples` samples of the training data, as one batch.
data::Batch first_samples(const data::Dataset& train, std::int64_t samples) {
  samples = std::min(samples, train.size());
  std::vector<std::int64_t> first(static_cast<std::size_t>(samples));
  for (std::int64_t i = 0; i < samples; ++i) first[static_cast<std::size_t>(i)] = i;
  data::FetchContext context;
  data::Batch batch = train.get_batch(first, context);
  train.finish_on_device(batch);
  return batch;
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
  // Not in a probe step: the optimizer's state (Adam: two tensors per parameter; SGD with momentum: one) and EMA's copy.
  std::int64_t param_bytes = 0;
  for (const auto& t : trainer.optimizer().parameters()) param_bytes += t.numel() * t.element_size();
  const std::string optimizer = config::get_string(c, "optim.type");
  const int states = optimizer == "sgd" ? (config::get_double(c, "optim.momentum") > 0 ? 1 : 0) : 2;
  const int copies = states + (config::get_bool(c, "ema.enabled") ? 1 : 0);
  request.later_bytes = param_bytes * copies;
  // On the CPU a checkpoint's host copy of the weights and that state is tensor memory too, while training goes on.
  if (p.device.is_cpu() && config::get_bool(c, "checkpoint.enabled")) request.later_bytes += param_bytes * (1 + copies);
  std::optional<data::Batch> batch;  // the loaded batch's samples, fetched once; trials take the first b
  plan::MicroBatchProbe probe;
  probe.measure_step = [&](std::int64_t samples) {
    if (!batch) batch = first_samples(train, request.loaded_batch);
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
    if (!batch) batch = first_samples(train, micro_batch);
    return trainer.measure_step_memory(*batch);
  };
  return plan::plan_checkpointing(request, hw, p, probe);
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


train::CheckpointOptions checkpoint_options(const config::Config& c, const fs::path& dir) {
  train::CheckpointOptions co;
  if (!config::get_bool(c, "checkpoint.enabled")) return co;
  co.dir = dir / "checkpoints";
  co.every_n_steps = config::get_int(c, "checkpoint.every_n_steps");
  co.every_n_minutes = config::get_double(c, "checkpoint.every_n_minutes");
  co.keep_last = config::get_int(c, "checkpoint.keep_last");
  co.keep_best = config::get_bool(c, "checkpoint.keep_best");
  co.at_end = config::get_bool(c, "checkpoint.at_end");
  return co;
}

obs::ProfileOptions profile_options(const config::Config& c, const fs::path& dir) {
  obs::ProfileOptions po;
  po.start_step = config::get_int(c, "profile.start_step");
  po.steps = config::get_int(c, "profile.steps");
  // profile.window "N-M" (--profile N-M): optimizer steps N to M, counted from 1, traced.
  if (const std::string window = config::get_string(c, "profile.window"); !window.empty()) {
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
                         fmt::format("profile.window is '{}' ({}), expected N-M with 1 <= N <= M", window, c.origin("profile.window").str()),
                         "give the optimizer steps to trace, counted from 1: --profile 5-7");
    po.enabled = true;
    po.start_step = first - 1;
    po.steps = last - first + 1;
  }
  po.enabled = po.enabled || config::get_bool(c, "profile.enabled");
  po.record_shapes = config::get_bool(c, "profile.record_shapes");
  po.profile_memory = config::get_bool(c, "profile.memory");
  po.path = dir / "trace.json";
  return po;
}

void set_flop_options(const config::Config& c, const hw::HardwareInfo& hw, const plan::Plan& p, bool may_measure,
                      train::TrainerOptions& o, std::vector<std::string>& notes) {
  o.count_flops = config::get_bool(c, "log.flops");
  if (!o.count_flops) return;
  const hw::CachedPeaks peaks = hw::cached_peaks(hw, may_measure);
  if (peaks.measured_now) {
    notes.push_back(fmt::format("measured this machine's matmul and copy peaks for MFU in {:.1f} s, once: cached in {} "
                                "(`bellows hw --measure` measures again)", peaks.seconds, peaks.file.string()));
  }
  if (const auto peak = hw::matmul_peak(peaks.peaks, p.precision, p.device.str())) {
    o.peak_flops_per_s = peak->flops_per_s;
    o.peak_name = fmt::format("{} on {}", peak->name, p.device.str());
  } else {
    notes.push_back(fmt::format("MFU not reported: no measured matmul peak for {} on {}{}", p.precision, p.device.str(),
                                peaks.peaks.empty() ? " (none cached; `bellows hw --measure` measures them once)" : ""));
  }
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
  r.cpu_allocator = config::get_string(c, "cpu_allocator");
  return r;
}

plan::Plan plan_with_auto_precision(const config::Config& c, const hw::HardwareInfo& hw) {
  plan::PlanRequest request = plan_request(c);
  request.precision = "auto";
  return plan::resolve(request, hw);
}

RunResult run(const config::Config& c, const RunOptions& options) {
  // --- plan: hardware facts + requested settings -> concrete settings with reasons ---
  const hw::HardwareInfo& hw = hw::HardwareInfo::get();
  const dist::ProcessInfo process = process_info(c);  // rank and world size from the launcher's environment
  plan::PlanRequest request = plan_request(c);
  request.local_rank = process.local_rank;
  request.local_world_size = process.local_world_size;
  request.share_node_cores = process.shares_node_cores();
  request.cores_per_process = process.cpus_per_process;
  plan::Plan p = plan::resolve(request, hw);  // make_loaders revises the workers once it has the data
  p.entries.insert(p.entries.begin(), profile_plan_entry(c, hw));  // which hardware profile, and why
  for (std::size_t i = 0; i < c.plan_notes().size(); ++i) {  // a tuned plan's settings, after the profile's row
    const auto& n = c.plan_notes()[i];
    p.entries.insert(p.entries.begin() + static_cast<std::ptrdiff_t>(1 + i), {n.key, n.value, n.reason});
  }
  plan::apply(p);
  // --- the job's processes meet first (a missing rank or a different config fails here, within dist.timeout_s) ---
  StrategySetup strategy = make_strategy(c, process, p);
  dist::Strategy& ranks = *strategy.strategy;
  p.entries.push_back(strategy.entry);
  obs::install_cpu_tracking();  // tensor memory on the CPU is counted from here on (obs/memory.h)
  const obs::CpuTensorLimit cpu_limit(static_cast<std::int64_t>(config::get_double(c, "cpu_tensor_limit_mb") * 1e6));
  models::set_dropout_masks(dropout_masks_setting(c));
  const auto seed = static_cast<std::uint64_t>(config::get_int(c, "seed"));
  torch::manual_seed(seed);
  std::vector<std::string> notes;  // messages from before the sinks exist; they reach every sink once it does

  // --- data: datasets, samplers, prefetching loaders on the planned device ---
  Loaders loaders = make_loaders(c, p, options.stream, ranks.rank(), ranks.world_size());
  check_data_against_model(c, *loaders.splits.train);

  // --- model, task, trainer ---
  models::BuiltModel built = build_model(c, model_context(loaders.splits), &notes);
  if (const auto& entry = models::find_model(config::get_string(c, "model.name")); entry.forward_flops && config::get_bool(c, "log.flops")) {
    if (const std::optional<double> f = entry.forward_flops(c, model_context(loaders.splits))) {
      notes.push_back(fmt::format("model FLOPs, analytic per layer (models/flops.h): {:.4g} GFLOP per sample forward, about {:.4g} "
                                  "for a training step (3x){}", *f / 1e9, 3 * *f / 1e9,
                                  entry.forward_flops_basis.empty() ? "" : "; " + entry.forward_flops_basis));
    }
  }
  if (const std::string init = config::get_string(c, "init_weights"); !init.empty()) {
    // Pretrained weights (e.g. a frozen encoder, seed 004), by name; a resumed checkpoint overrides them.
    const models::WeightImport w{init, "", config::get_bool(c, "init_weights_strict"), "model", "init_weights_strict"};
    notes.push_back(import_note(w, import_weights(*built.module, w)));
  }
  // --- run directory ---
  // Rank 0 picks it (and alone writes into it); the others learn its name.
  const fs::path dir = broadcast_text(ranks, ranks.is_main() ? make_run_dir(c).string() : std::string());
  TrainerOptions trainer_opts = trainer_options(c, p);
  trainer_opts.stop_flag = options.stop_flag;
  trainer_opts.strategy = strategy.strategy;
  trainer_opts.checkpoint = checkpoint_options(c, dir);
  trainer_opts.profile = profile_options(c, dir);
  // Several ranks measuring at once would measure each other: they use the cache, or report no MFU.
  set_flop_options(c, hw, p, /*may_measure=*/ranks.world_size() == 1, trainer_opts, notes);
  const plan::PlanEntry compile = resolve_compile(c, trainer_opts, ranks.world_size());
  p.entries.push_back(compile);
  trainer_opts.checkpoint_info = {{"config", c.to_yaml()}, {"plan", nlohmann::json::parse(p.to_json())}};
  Trainer trainer(built.module, built.task, trainer_opts);
  std::optional<plan::PlanEntry> micro_batch;  // data.batch_size: auto
  if (config::is_word(c, "data.batch_size", "auto")) micro_batch = plan_micro_batch(c, hw, p, trainer, *loaders.splits.train, ranks);
  const std::int64_t planned_split = trainer.micro_split();
  const std::int64_t micro_samples = (loaded_batch_size(c, ranks.world_size()) + planned_split - 1) / planned_split;
  const plan::PlanEntry checkpointing = plan_checkpointing(c, hw, p, *built.module, trainer, *loaders.splits.train, micro_samples);

  // --- sinks: rank 0's (records are global: the trainer sums over ranks) ---
  plan::Plan recorded = p;  // the plan with the model-dependent rows
  if (micro_batch) recorded.entries.push_back(*micro_batch);
  recorded.entries.push_back(checkpointing);
  if (ranks.is_main()) {
    write_file_atomically(dir / "config.resolved.yaml", c.to_yaml());  // a resumed run rewrites them
    write_file_atomically(dir / "plan.json", recorded.to_json());
  }
  trainer.set_run_info(config::get_string(c, "name"), dir.string());
  auto header = header_rows(hw, p);
  if (micro_batch) header.emplace_back(micro_batch->key, fmt::format("{:<11} {}", micro_batch->value, micro_batch->reason));
  header.emplace_back(checkpointing.key, fmt::format("{:<11} {}", checkpointing.value, checkpointing.reason));
  trainer.set_header(std::move(header));
  if (ranks.is_main()) {
    if (options.console) trainer.add_sink(std::make_shared<obs::ConsoleSink>(options.console, options.tty));
    trainer.add_sink(std::make_shared<obs::JsonlSink>(dir / "metrics.jsonl"));
    if (config::get_bool(c, "log.tensorboard")) trainer.add_sink(std::make_shared<obs::TensorBoardSink>(dir));
    for (const auto& sink : options.sinks) trainer.add_sink(sink);
  }
  for (const auto& note : notes) trainer.message(note);

  // --- resume: the newest valid checkpoint of this run (auto) or the one named ---
  const std::string resume = config::get_string(c, "resume");
  if (!resume.empty()) {
    std::optional<fs::path> from;
    if (resume == "auto") {
      std::vector<std::string> skipped;
      from = ckpt::find_latest_valid(dir / "checkpoints", &skipped);
      for (const auto& s : skipped) trainer.message(fmt::format("warning: skipped checkpoint {}", s));
      if (!from) trainer.message(fmt::format("resume auto: no valid checkpoint in {}; starting from the beginning", (dir / "checkpoints").string()));
    } else {
      from = ckpt::resolve_checkpoint(resume);
    }
    if (from) {
      const ckpt::Checkpoint cp = ckpt::load_checkpoint(*from);
      if (const auto saved = cp.state.find("data.sampler.world_size"); saved != cp.state.end()) {
        const std::int64_t world = saved->second.item<std::int64_t>();
        if (world != ranks.world_size()) {
          trainer.message(fmt::format("warning: the checkpoint was written by {} process(es), this run has {}: training continues from the "
                                      "same step and the same fraction of the epoch, but the data order differs from the original run's",
                                      world, ranks.world_size()));
        }
      }
      try {
        trainer.restore(cp, loaders.train.get(), config::get_bool(c, "checkpoint.strict"));
      } catch (const Error& e) {  // which checkpoint did not fit: resume=auto chose it for the user
        throw Error(e.kind(), fmt::format("resuming from {}: {}", from->string(), e.message()), e.hint());
      }
      trainer.message(fmt::format("resumed from {} (step {}, epoch {})", from->string(), cp.step, cp.epoch));
      if (micro_batch && trainer.micro_split() != planned_split) {
        trainer.message(fmt::format("note: each loaded batch runs as {} micro-batches, as in the checkpoint (the finder chose {})",
                                    trainer.micro_split(), micro_batch->value));
      }
    }
  }

  // --- train ---
  RunResult result;
  result.run_dir = dir;
  result.fit = trainer.fit(*loaders.train, loaders.val.get());
  result.data = loaders.train->stats();
  if (options.console && ranks.is_main()) {  // after the summary table, so to the console only (metrics.jsonl ends with the run's end record)
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

}  // namespace bellows::app
