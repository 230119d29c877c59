// The training loop. Trainer::fit reads top to bottom as the story of a step (docs/architecture.md): fetch
// micro-batches, forward under autocast, backward through the precision policy, unscale, clip, step
// (skipped on non-finite gradients), schedule, EMA, meters, evaluation.
#include "bellows/train/trainer.h"

#include <ATen/ATen.h>
#include <ATen/record_function.h>
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <torch/csrc/autograd/anomaly_mode.h>
#include <torch/csrc/autograd/grad_mode.h>

#include <chrono>
#include <cmath>
#include <unordered_map>
#include <future>
#include <tuple>

#include "bellows/models/activation_checkpoint.h"  // defines: Checkpointable
#include "bellows/obs/memory.h"
#include "bellows/obs/phase_clock.h"
#include "bellows/train/checkpointing.h"
#include "bellows/train/freeze.h"
#include "bellows/util/check.h"
#include "bellows/util/exception_report.h"
#include "bellows/util/format.h"  // defines: shape_of
#include "bellows/util/module_tensors.h"  // defines: named_parameters, named_state
#include "bellows/util/timer.h"           // defines: seconds_since

namespace bellows::train {
namespace {

double now_s() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }

data::Batch to_device(const data::Batch& batch, const TrainerOptions& options) {
  data::Batch b = batch.to(options.device, options.non_blocking);
  if (options.channels_last) {
    for (auto& [name, t] : b.tensors) {
      if (t.dim() == 4 && t.is_floating_point()) t = t.contiguous(at::MemoryFormat::ChannelsLast);
    }
  }
  return b;
}

bool uses_total_steps(const std::string& type) { return type == "cosine" || type == "linear"; }

// The captured step of a fit (TrainerOptions::compile): the graph, the batch tensors its replays read (each step's
// batch is copied into them) and the outputs its replays write.
struct GraphedStep {
  std::unique_ptr<StepGraph> graph;
  std::int64_t warmed = 0;  // warm-up steps run
  bool captured = false;
  data::Batch inputs;
  StepOutput out;
  at::Tensor grad_norm, skipped, param_norms;
  std::vector<std::int32_t> grad_params;
  bool told_layout = false;  // the message about a batch of other shapes was given
};

// The same tensors by name, with the same shapes, dtypes and strides: a batch a graph captured with `b` can read.
bool same_layout(const data::Batch& a, const data::Batch& b) {
  if (a.tensors.size() != b.tensors.size()) return false;
  for (const auto& [name, t] : a.tensors) {
    const auto it = b.tensors.find(name);
    if (it == b.tensors.end() || t.sizes() != it->second.sizes() || t.strides() != it->second.strides() ||
        t.scalar_type() != it->second.scalar_type()) {
      return false;
    }
  }
  return true;
}

std::string layout_of(const data::Batch& b) {
  std::vector<std::string> parts;
  for (const auto& [name, t] : b.tensors) parts.push_back(fmt::format("{} {}", name, shape_of(t)));
  return fmt::format("{}", fmt::join(parts, ", "));
}

// sum += value, on the device; the first value is copied (it may alias a tensor the step still uses).
void accumulate(at::Tensor& sum, const at::Tensor& value) {
  if (sum.defined()) sum.add_(value);
  else sum = value.clone();
}

// Float64 scalars (or one-element tensors) summed over every rank and read back to the host: one collective and
// one read for all of them.
std::vector<double> sums_over_ranks(dist::Strategy& strategy, const std::vector<at::Tensor>& scalars) {
  std::vector<at::Tensor> parts;
  for (const auto& t : scalars) parts.push_back(t.to(at::kDouble).reshape({1}));
  std::vector<at::Tensor> packed{at::cat(parts)};
  strategy.all_reduce_sum(packed);
  const at::Tensor host = packed[0].cpu();
  return {host.data_ptr<double>(), host.data_ptr<double>() + host.numel()};
}

// detect_anomaly: the name of the first tensor with a NaN or an infinity ("" when all are finite), and what it
// holds. Waits for the device.
std::string first_nonfinite(const std::vector<std::pair<std::string, at::Tensor>>& named) {
  for (const auto& [name, t] : named) {
    if (!t.defined() || !at::isFloatingType(t.scalar_type())) continue;
    const at::Tensor bad = t.detach().isfinite().logical_not();
    if (const std::int64_t n = bad.sum().item<std::int64_t>(); n > 0) {
      return fmt::format("{} ({} of {} values: {} NaN, {} infinite)", name, n, t.numel(), t.detach().isnan().sum().item<std::int64_t>(),
                         t.detach().isinf().sum().item<std::int64_t>());
    }
  }
  return "";
}

std::vector<std::pair<std::string, at::Tensor>> gradients_of(const NamedTensors& params) {
  std::vector<std::pair<std::string, at::Tensor>> grads;
  for (const auto& [name, p] : params) grads.emplace_back(name, p.grad());
  return grads;
}

}  // namespace

// Sums over one logging window, kept as device tensors so that logging is the only synchronisation: the
// losses and metrics, the finite gradient norms, and the skip count at the window's start.
struct Trainer::Window {
  at::Tensor loss_sum;
  std::vector<std::pair<std::string, at::Tensor>> metric_sums;
  std::int64_t micro_batches = 0;
  at::Tensor grad_norm_sum;
  std::int64_t optimizer_calls = 0;  // stepped or skipped
  std::int64_t first_step = 0;       // the step counter at the window's start
  std::int64_t skipped_before = 0;   // the precision policy's skip count at the window's start
  std::int64_t samples = 0;
  double start_s = 0;
  double epoch_start_s = 0;
  obs::PhaseClock* clock = nullptr;  // fit()'s: the window's time by phase
  // Each optimizer step's per-parameter gradient norms (on the device, no extra op: clip_gradients makes them)
  // and whose they are; read only when the record finds skipped steps, to name the step and the parameter.
  std::vector<std::pair<at::Tensor, std::vector<std::int32_t>>> step_norms;

  void add(const StepOutput& out) {
    accumulate(loss_sum, out.loss.detach().to(at::kFloat));
    if (metric_sums.empty()) {
      for (const auto& [name, value] : out.metrics) metric_sums.emplace_back(name, at::Tensor());
    }
    for (std::size_t i = 0; i < metric_sums.size() && i < out.metrics.size(); ++i) {
      accumulate(metric_sums[i].second, out.metrics[i].second.detach().to(at::kFloat));
    }
    ++micro_batches;
  }
  // Tokens or pixels, where the batch has them (throughput beside samples/s): token ids "x" [B, T] (integer; the
  // real ones when an "x_mask" marks them, summed on the device) or images "x" [B, C, H, W] (B x H x W pixels).
  struct Units {
    std::string unit;      // "tokens", "pixels", or "" (neither)
    double host = 0;       // counted on the host
    at::Tensor on_device;  // counted on the device (masked tokens)
  };
  static Units units_of(const data::Batch& b) {
    Units u;
    const auto it = b.tensors.find("x");
    if (it == b.tensors.end() || !it->second.defined()) return u;
    const at::Tensor& x = it->second;
    if (!at::isFloatingType(x.scalar_type()) && x.dim() == 2) {
      u.unit = "tokens";
      if (const auto mask = b.tensors.find("x_mask"); mask != b.tensors.end() && mask->second.sizes() == x.sizes()) {
        u.on_device = mask->second.ne(0).sum().to(at::kFloat);
      } else {
        u.host = static_cast<double>(x.numel());
      }
    } else if (at::isFloatingType(x.scalar_type()) && x.dim() == 4) {
      u.unit = "pixels";
      u.host = static_cast<double>(x.size(0) * x.size(2) * x.size(3));
    }
    return u;
  }
  std::string unit;                 // "tokens", "pixels", or "" (neither)
  double units = 0;                 // counted on the host
  at::Tensor units_on_device;       // counted on the device (masked tokens)
  void add_units(const Units& u) {
    if (u.unit.empty()) return;
    unit = u.unit;
    units += u.host;
    if (u.on_device.defined()) accumulate(units_on_device, u.on_device);
  }
  void reset(double t, std::int64_t step, std::int64_t skipped) {  // a new logging window; the epoch's start time stays
    loss_sum = grad_norm_sum = units_on_device = at::Tensor();
    units = 0;
    metric_sums.clear();
    step_norms.clear();
    micro_batches = optimizer_calls = samples = 0;
    first_step = step;
    skipped_before = skipped;
    start_s = t;
  }
};

// What a training step changes besides the weights, gradients and optimizer: the buffers (BatchNorm statistics,
// counters) and the RNG states (dropout draws). measure_step_memory puts them back after its probe step, out-of-memory
// recovery before it runs a step again. The copies of the buffers are made at the first save() and refilled after.
struct Trainer::StepUndo {
  explicit StepUndo(torch::nn::Module& model) {
    for (auto& b : model.buffers()) {
      if (b.defined() && b.numel() > 0) live.push_back(b);
    }
  }
  void save() {
    rng = rng_state();
    torch::NoGradGuard no_grad;
    if (saved.empty()) {
      for (const auto& b : live) saved.push_back(b.clone());
    } else if (!live.empty()) {
      at::_foreach_copy_(saved, live);
    }
  }
  void restore() const {
    {
      torch::NoGradGuard no_grad;
      if (!live.empty()) at::_foreach_copy_(live, saved);
    }
    load_rng_state(rng);
  }

  std::vector<at::Tensor> live, saved;
  StateDict rng;
};

Trainer::Trainer(std::shared_ptr<torch::nn::Module> model, std::shared_ptr<Task> task, TrainerOptions options)
    : model_(std::move(model)), task_(std::move(task)), options_(std::move(options)) {
  BELLOWS_CHECK_CONFIG(model_ != nullptr && task_ != nullptr, "the trainer needs a model and a task", "pass both");
  BELLOWS_CHECK_CONFIG(options_.epochs >= 1, fmt::format("epochs is {}, expected >= 1", options_.epochs), "set train.epochs");
  BELLOWS_CHECK_CONFIG(options_.accumulation_steps >= 1,
                       fmt::format("accumulation_steps is {}, expected >= 1", options_.accumulation_steps),
                       "set train.accumulation_steps to 1 (no accumulation) or more");
  BELLOWS_CHECK_CONFIG(options_.clip_max_norm >= 0 && options_.clip_value >= 0,
                       fmt::format("clip_max_norm={} clip_value={}, expected >= 0", options_.clip_max_norm, options_.clip_value),
                       "use 0 to disable clipping");
  BELLOWS_CHECK_CONFIG(options_.log_every_n_steps >= 1, "log_every_n_steps must be >= 1", "set train.log_every_n_steps");
  BELLOWS_CHECK_CONFIG(!options_.eval_with_ema || options_.ema.has_value(), "eval_with_ema is set but EMA is off",
                       "enable ema or unset eval_with_ema");
  BELLOWS_CHECK_CONFIG(options_.compile == "off" || options_.compile == "cuda_graph", fmt::format("compile is '{}'", options_.compile),
                       "set compile to off or cuda_graph (a config's auto is resolved before the trainer)");
  const std::string& on_nonfinite = options_.on_nonfinite;
  BELLOWS_CHECK_CONFIG(on_nonfinite == "auto" || on_nonfinite == "stop" || on_nonfinite == "skip",
                       fmt::format("on_nonfinite is '{}'", on_nonfinite), "set train.on_nonfinite to auto, stop or skip");
  const bool scaled = options_.precision == "fp16-mixed";  // its loss scaler skips overflowing steps by design
  BELLOWS_CHECK_CONFIG(!(scaled && on_nonfinite == "stop"),
                       "train.on_nonfinite: stop conflicts with precision fp16-mixed, whose loss scaler skips the steps that "
                       "overflow and lowers its scale by design (the first steps often do)",
                       "use train.on_nonfinite: auto (or skip) with fp16-mixed, or precision bf16-mixed to stop at non-finite gradients");
  stop_on_nonfinite_ = on_nonfinite == "stop" || (on_nonfinite == "auto" && !scaled);

  if (!options_.strategy) options_.strategy = std::make_shared<dist::SingleDevice>();
  model_->to(options_.device);
  if (options_.channels_last) {
    torch::NoGradGuard no_grad;
    for (auto& p : model_->parameters()) {
      if (p.dim() == 4) p.set_data(p.contiguous(at::MemoryFormat::ChannelsLast));
    }
  }
  if (!options_.freeze.empty()) frozen_ = freeze(bellows::named_parameters(*model_), options_.freeze);
  precision_ = precision::make_precision(options_.precision, options_.device, options_.scaler);
  precision_->configure_backends();
  optimizer_ = std::make_unique<Optimizer>(bellows::named_parameters(*model_), options_.optimizer);
  if (options_.ema) ema_ = std::make_unique<Ema>(bellows::named_state(*model_), *options_.ema);
  if (options_.sessions) {
    // Sessions have no planned end: a schedule that decays over the run's steps must be told how many.
    BELLOWS_CHECK_CONFIG(!uses_total_steps(options_.schedule.type) || options_.schedule.total_steps > 0,
                         fmt::format("schedule.type is {}, which decays over schedule.total_steps, but online training has no "
                                     "planned end and schedule.total_steps is 0", options_.schedule.type),
                         "set schedule.total_steps (sessions x optimizer steps per session), or use schedule.type constant");
    schedule_ = build_schedule(0);
  }
}

std::unique_ptr<Schedule> Trainer::build_schedule(std::int64_t planned) {
  ScheduleOptions schedule_options = options_.schedule;
  if (schedule_options.mode == "auto") schedule_options.mode = task_->lower_is_better() ? "min" : "max";
  if (uses_total_steps(schedule_options.type) && schedule_options.total_steps == 0) {
    schedule_options.total_steps = planned;
    if (planned <= schedule_options.warmup_steps) {  // a short run (max_steps) inside the warmup
      schedule_options.total_steps = schedule_options.warmup_steps + 1;
      message(fmt::format("note: the run's {} optimizer steps end inside the {} warmup steps; the {} decay will not be reached",
                          planned, schedule_options.warmup_steps, schedule_options.type));
    }
  }
  return make_schedule(schedule_options, options_.optimizer.lr);
}

void Trainer::message(const std::string& text) {
  for (auto& sink : sinks_) sink->on_message(text);
}

at::Tensor Trainer::clip_gradients(const std::vector<at::Tensor>& params) {
  std::vector<at::Tensor>& grads = grads_;  // reused step after step
  grads.clear();
  grad_params_.clear();
  for (std::size_t i = 0; i < params.size(); ++i) {
    if (!params[i].grad().defined()) continue;
    grads.push_back(params[i].grad());
    grad_params_.push_back(static_cast<std::int32_t>(i));
  }
  param_norms_ = at::Tensor();
  if (grads.empty()) return at::zeros({}, at::TensorOptions().dtype(at::kFloat).device(options_.device));
  // Everything stays on the device (no .item()): the norm is the step's non-finite check and a reported
  // metric, read at the logging boundary. The arithmetic is torch.nn.utils.clip_grad_norm_'s.
  const std::vector<at::Tensor> norms = at::_foreach_norm(grads, 2);
  param_norms_ = at::stack(norms).to(at::kFloat);  // kept by the window: which gradient was not finite
  const at::Tensor total = at::linalg_vector_norm(param_norms_, 2);
  if (options_.clip_max_norm > 0) {
    // Multiplying by exactly 1 leaves a gradient as it is; a non-finite norm makes a skipped step anyway.
    at::_foreach_mul_(grads, (options_.clip_max_norm / (total + 1e-6)).clamp_max(1.0));
  }
  if (options_.clip_value > 0) {
    at::_foreach_clamp_min_(grads, -options_.clip_value);
    at::_foreach_clamp_max_(grads, options_.clip_value);
  }
  return total;
}

std::pair<at::Tensor, at::Tensor> Trainer::optimizer_phase(const std::vector<at::Tensor>& params) {
  options_.strategy->finish_gradients();  // the mean over ranks: every rank clips and skips alike from here
  precision_->unscale(params);
  if (options_.detect_anomaly) check_gradients();
  const at::Tensor grad_norm = clip_gradients(params);
  // x - x is 0 for a finite x and NaN for inf or NaN: the non-finite flag in three ops, 0 or 1.
  const at::Tensor nonfinite = (grad_norm - grad_norm).ne(0).to(at::kFloat);
  const at::Tensor skipped = precision_->step_on_device(params, nonfinite, [&](const at::Tensor& found_inf) { optimizer_->step(found_inf); });
  optimizer_->zero_grad();
  return {grad_norm, skipped};
}

StepGraphConditions step_graph_conditions(const TrainerOptions& o, std::int64_t world_size) {
  StepGraphConditions c;
  c.cuda = o.device.is_cuda() || static_cast<bool>(o.step_graph_factory);
  c.accumulation_steps = o.accumulation_steps;
  c.ema = o.ema.has_value();
  c.world_size = world_size;
  c.detect_anomaly = o.detect_anomaly;
  c.oom_recovery = o.oom_recovery;
  c.fused_optimizer = o.optimizer.implementation != "foreach";
  c.sessions = o.sessions;
  return c;
}

std::string Trainer::step_graph_problem() const {
  StepGraphConditions c = step_graph_conditions(options_, options_.strategy->world_size());
  // What only the trainer knows: the batch-size finder's split, the optimizer's kernels, the checkpointed blocks.
  c.micro_split = micro_split_;
  c.fused_optimizer = optimizer_->fused();
  const auto* blocks = dynamic_cast<const models::Checkpointable*>(model_.get());
  c.activation_checkpointing = blocks != nullptr && !blocks->checkpointed().empty();
  return step_graph_unfit(c);
}

void Trainer::emit_step(Window& w, std::int64_t epoch, std::int64_t batch_in_epoch, std::int64_t batches_per_epoch) {
  if (w.micro_batches == 0) return;
  const double t = now_s();
  obs::StepRecord r;
  r.step = step_;
  r.epoch = epoch;
  r.batch_in_epoch = batch_in_epoch;
  r.batches_per_epoch = batches_per_epoch;
  r.elapsed_s = t - run_start_s_;
  r.epoch_elapsed_s = t - w.epoch_start_s;
  r.samples_per_s = w.samples / std::max(t - w.start_s, 1e-9);
  r.step_time_ms = 1000.0 * (t - w.start_s) / std::max<std::int64_t>(w.optimizer_calls, 1);
  r.lr = optimizer_->lr();
  dist::Strategy& strategy = *options_.strategy;
  const double n = static_cast<double>(w.micro_batches) * strategy.world_size();
  // --- the window's one synchronisation: its sums (over every rank) and skip count come back from the device ---
  std::vector<at::Tensor> parts{w.loss_sum};
  for (const auto& [name, sum] : w.metric_sums) parts.push_back(sum);
  if (w.units_on_device.defined()) parts.push_back(w.units_on_device);  // read with the rest: no extra sync
  const std::vector<double> sum = sums_over_ranks(strategy, parts);
  r.values.emplace_back("loss", sum[0] / n);
  for (std::size_t i = 0; i < w.metric_sums.size(); ++i) r.values.emplace_back(w.metric_sums[i].first, sum[i + 1] / n);
  if (!w.unit.empty()) {  // every rank's share: host counts times the ranks, device counts summed over them
    const double units = w.units * static_cast<double>(strategy.world_size()) + (w.units_on_device.defined() ? sum.back() : 0.0);
    r.values.emplace_back(w.unit + "_per_s", units / std::max(t - w.start_s, 1e-9));
  }
  const double norm_sum = w.grad_norm_sum.defined() ? w.grad_norm_sum.item<double>() : 0.0;
  r.values.emplace_back("grad_norm", norm_sum / std::max<std::int64_t>(w.optimizer_calls, 1));
  const std::int64_t skipped = precision_->skipped_steps();
  std::string nonfinite_stop;  // the error that ends the run after this record (on_nonfinite: stop)
  if (skipped > w.skipped_before) {
    const std::string first = first_nonfinite_step(w);
    message(fmt::format("{} of optimizer steps {}-{} skipped: non-finite gradients ({}); parameters, optimizer state and EMA are "
                        "unchanged by them (the step count and the schedule advance, as in PyTorch)",
                        skipped - w.skipped_before, w.first_step + 1, step_, first));
    if (stop_on_nonfinite_) nonfinite_stop = first;
  }
  for (const auto& m : precision_->metrics()) r.values.push_back(m);
  for (const auto& m : strategy.metrics()) r.values.push_back(m);  // communication time, with several ranks
  // Memory monitoring (seeds 003, 004): tensor memory on the device now and at its peak over the window, and the
  // peak by phase (the clock's laps reset the device's peak: the window's is the largest of its phases').
  if (const obs::MemoryStats mem = obs::memory_stats(options_.device); mem.tracked) {
    std::int64_t peak = mem.peak_bytes;  // since the clock's last lap
    if (w.clock != nullptr) {
      const std::array<std::int64_t, obs::kPhases> phase_peaks = w.clock->take_memory();
      for (std::size_t i = 0; i < obs::kPhases; ++i) {
        if (phase_peaks[i] < 0) continue;
        peak = std::max(peak, phase_peaks[i]);
        r.phase_mem_mb.emplace_back(obs::phase_name(static_cast<obs::Phase>(i)), static_cast<double>(phase_peaks[i]) / 1e6);
      }
    }
    r.values.emplace_back("mem_mb", static_cast<double>(mem.current_bytes) / 1e6);
    r.values.emplace_back("mem_peak_mb", static_cast<double>(peak) / 1e6);
    if (mem.reserved_bytes >= 0) r.values.emplace_back("mem_reserved_mb", static_cast<double>(mem.reserved_bytes) / 1e6);
    obs::reset_peak(options_.device);
  }
  // The whole process (seed 004's tracker): resident memory now and its peak so far.
  if (const obs::ProcessMemory proc = obs::process_memory(); proc.rss_bytes >= 0) {
    r.values.emplace_back("rss_mb", static_cast<double>(proc.rss_bytes) / 1e6);
    r.values.emplace_back("rss_peak_mb", static_cast<double>(proc.peak_rss_bytes) / 1e6);
  }
  // Achieved FLOP/s per device and MFU against the measured matmul peak of the precision in use.
  if (flops_per_sample_ > 0) {
    const double per_device = flops_per_sample_ * r.samples_per_s / static_cast<double>(strategy.world_size());
    r.values.emplace_back("gflops", per_device / 1e9);
    if (options_.peak_flops_per_s > 0) r.values.emplace_back("mfu", per_device / options_.peak_flops_per_s);
  }
  // Where the window's time went, per optimizer step (obs/phase_clock.h); read after the sync above.
  if (w.clock != nullptr) {
    const std::array<double, obs::kPhases> ms = w.clock->take();
    for (std::size_t i = 0; i < obs::kPhases; ++i) {
      r.phase_ms.emplace_back(obs::phase_name(static_cast<obs::Phase>(i)), ms[i] / std::max<std::int64_t>(w.optimizer_calls, 1));
    }
  }
  for (auto& sink : sinks_) sink->on_step(r);
  last_record_ = r;
  w.reset(t, step_, skipped);  // keeps epoch_start_s
  // After the record reached the sinks (metrics.jsonl has the window): on_nonfinite stop ends the run here.
  BELLOWS_CHECK_DATA(nonfinite_stop.empty(),
                     fmt::format("non-finite gradients: {}; the step was skipped, so the weights are those before it "
                                 "(train.on_nonfinite: {}; noticed at the record of step {})",
                                 nonfinite_stop, options_.on_nonfinite, step_),
                     "lower optim.lr or clip gradients (train.clip_max_norm); check the data (train.detect_anomaly=true names the "
                     "first non-finite tensor); or set train.on_nonfinite: skip to train on past such steps");
}

std::string Trainer::first_nonfinite_step(const Window& w) const {
  // Rare (a skipped step): one read per step of the window, until the first that was not finite.
  for (std::size_t i = 0; i < w.step_norms.size(); ++i) {
    const auto& [norms, owners] = w.step_norms[i];
    if (!norms.defined()) continue;
    const at::Tensor host = norms.to(at::kCPU, at::kDouble);
    const double* n = host.const_data_ptr<double>();
    float squares = 0;  // in float32, as the device sums them
    for (std::int64_t k = 0; k < host.numel(); ++k) {
      if (!std::isfinite(n[k])) {
        const std::int32_t index = owners.at(static_cast<std::size_t>(k));
        const std::string name = static_cast<std::size_t>(index) < param_names_.size() ? param_names_[index] : fmt::format("parameter {}", index);
        return fmt::format("the first at optimizer step {}, in the gradient of {} ({})", w.first_step + static_cast<std::int64_t>(i) + 1, name,
                           std::isnan(n[k]) ? "NaN" : "infinite");
      }
      squares += static_cast<float>(n[k]) * static_cast<float>(n[k]);
    }
    // Every parameter's norm finite, their float sum of squares not: the global norm overflowed.
    if (!std::isfinite(squares)) {
      return fmt::format("the first at optimizer step {}: every gradient was finite, their global norm overflowed float32",
                         w.first_step + static_cast<std::int64_t>(i) + 1);
    }
  }
  return "the step was not found among the window's gradient norms";
}

std::vector<std::pair<std::string, double>> Trainer::evaluate(data::BatchSource& val) {
  options_.strategy->sync_buffers(*model_);  // every rank evaluates the model rank 0 saves
  torch::NoGradGuard no_grad;
  const bool was_training = model_->is_training();
  model_->eval();
  if (options_.eval_with_ema) ema_->swap();
  val.start_epoch(0);
  // Sample-weighted sums kept on the device (float64): read once, after the last batch.
  at::Tensor loss_sum;
  std::vector<std::pair<std::string, at::Tensor>> metric_sums;
  double weight = 0;
  auto add = [](at::Tensor& sum, const at::Tensor& value, double w) { accumulate(sum, value.detach().to(at::kDouble) * w); };
  while (auto batch = val.next()) {
    const data::Batch b = to_device(*batch, options_);
    StepOutput out;
    {
      auto guard = precision_->autocast();
      out = task_->eval_step(*model_, b);
    }
    const double w = static_cast<double>(b.size);
    add(loss_sum, out.loss, w);
    if (metric_sums.empty()) {
      for (const auto& [name, v] : out.metrics) metric_sums.emplace_back(name, at::Tensor());
    }
    for (std::size_t i = 0; i < metric_sums.size() && i < out.metrics.size(); ++i) add(metric_sums[i].second, out.metrics[i].second, w);
    weight += w;
  }
  if (options_.eval_with_ema) ema_->swap();
  if (was_training) model_->train();
  // Every rank evaluated its own share: the sums and the weight are added up over ranks (one collective).
  const auto on_device = at::TensorOptions().dtype(at::kDouble).device(options_.device);
  std::vector<at::Tensor> parts{at::scalar_tensor(weight, on_device), loss_sum.defined() ? loss_sum : at::zeros({}, on_device)};
  for (const auto& [name, sum] : metric_sums) parts.push_back(sum.defined() ? sum : at::zeros({}, on_device));
  const std::vector<double> total = sums_over_ranks(*options_.strategy, parts);
  BELLOWS_CHECK_DATA(total[0] > 0, "the validation data produced no batches", "check the validation split and batch size");
  std::vector<std::pair<std::string, double>> values = {{"loss", total[1] / total[0]}};
  for (std::size_t i = 0; i < metric_sums.size(); ++i) values.emplace_back(metric_sums[i].first, total[i + 2] / total[0]);
  return values;
}

FitResult Trainer::fit(data::BatchSource& train, data::BatchSource* val) {
  last_phase_ = obs::Phase::kOther;
  try {
    return fit_steps(train, val);
  } catch (...) {
    // Out of memory (an allocation of the CPU's counting allocator, a full GPU, a failed host allocation): a
    // resource error (exit code 4) that says where in the step it happened and what the memory held.
    const ExceptionReport r = report_current_exception();
    if (!r.out_of_memory) throw;
    const obs::MemoryStats mem = obs::memory_stats(options_.device);
    const obs::ProcessMemory proc = obs::process_memory();
    std::string held;
    if (mem.tracked) held += fmt::format("; tensor memory on {} peaked at {:.1f} MB in this logging window", options_.device.str(), mem.peak_bytes / 1e6);
    if (const std::int64_t limit = obs::cpu_tensor_limit(); limit > 0 && options_.device.is_cpu()) {
      held += fmt::format(" (cpu_tensor_limit_mb {:.0f})", limit / 1e6);
    }
    if (proc.rss_bytes >= 0) held += fmt::format("; process memory (RSS) {:.1f} MB, peak {:.1f} MB", proc.rss_bytes / 1e6, proc.peak_rss_bytes / 1e6);
    if (!oom_note_.empty()) held += "; " + oom_note_;
    // After an optimizer phase the step is done: what failed is what follows it (records, evaluation, a checkpoint).
    const std::string what =
        last_phase_ == obs::Phase::kOptimizer
            ? fmt::format("ran out of memory after optimizer step {} (in its records, an evaluation or a checkpoint's copies)", step_)
            : fmt::format("optimizer step {} ran out of memory after its {} phase", step_ + 1, obs::phase_name(last_phase_));
    BELLOWS_FAIL(ErrorKind::kResource, fmt::format("{}: {}{}", what, r.message.empty() ? "out of memory" : r.message, held),
                 r.hint.empty() ? std::string(kOutOfMemoryHint) : r.hint);
  }
}

bool Trainer::recover_from_oom(const data::Batch& batch, const StepUndo& undo) {
  if (!report_current_exception().out_of_memory) return false;
  if (const std::string why = oom_split_problem(batch); !why.empty()) {
    oom_note_ = why;
    return false;
  }
  // last_phase_ is the last phase that ended: the failure was in the one after it.
  const obs::Phase failed_in = last_phase_ == obs::Phase::kCopy      ? obs::Phase::kForward
                               : last_phase_ == obs::Phase::kForward ? obs::Phase::kBackward
                                                                     : obs::Phase::kCopy;
  split_after_oom(batch.size, undo, fmt::format("in its {} phase", obs::phase_name(failed_in)));
  return true;
}

std::string Trainer::oom_split_problem(const data::Batch& batch) const {
  if (const std::string why = batch.unsplittable(); !why.empty()) return "out-of-memory recovery cannot split the batch: " + why;
  const std::int64_t micro_batch = (batch.size + micro_split_ - 1) / micro_split_;  // the largest part that failed
  if (micro_batch > 1) return "";
  return oom_recoveries_ > 0 ? fmt::format("a micro-batch of 1 sample ran out of memory after {} out-of-memory recoveries", oom_recoveries_)
                             : "a micro-batch of 1 sample ran out of memory";
}

void Trainer::split_after_oom(std::int64_t batch_size, const StepUndo& undo, const std::string& failed_in) {
  const std::int64_t micro_batch = (batch_size + micro_split_ - 1) / micro_split_;
  // Everything the step's micro-batches changed goes back to how it was before the step: gradients, buffers,
  // RNG states. What the failed attempt held was released with the exception; the cached blocks go too.
  optimizer_->zero_grad();
  undo.restore();
  obs::release_cached_memory(options_.device);
  micro_split_ *= 2;
  ++oom_recoveries_;
  const std::int64_t smaller = (batch_size + micro_split_ - 1) / micro_split_;
  message(fmt::format("optimizer step {} ran out of memory {} with micro-batches of {} samples: each loaded batch now runs "
                      "as {} micro-batches of {} samples ({} per optimizer step), and the step runs again from its first sample "
                      "(gradients, buffers and RNG states as before it; the effective batch and the sample order stay)",
                      step_ + 1, failed_in, micro_batch, micro_split_, smaller, micro_split_ * options_.accumulation_steps));
}

void Trainer::set_micro_split(std::int64_t parts) {
  BELLOWS_CHECK_CONFIG(parts >= 1, fmt::format("micro-batches per loaded batch: {}, expected >= 1", parts), "pass 1 or more");
  micro_split_ = parts;
}

void Trainer::lap(obs::PhaseClock& clock, obs::Phase phase) {
  clock.lap(phase);
  last_phase_ = phase;
}

FitResult Trainer::fit_steps(data::BatchSource& train, data::BatchSource* val) {
  const std::int64_t k = options_.accumulation_steps;
  const std::int64_t batches_per_epoch = train.batches_per_epoch();
  BELLOWS_CHECK_DATA(batches_per_epoch > 0, "the training data produced no batches",
                     "check the data source: fewer samples than one batch with drop_last?");
  const std::int64_t steps_per_epoch = (batches_per_epoch + k - 1) / k;
  if (options_.sessions) {  // a session starts at its data's beginning and plans from the steps taken so far
    epoch_ = 0;
    batches_in_epoch_ = 0;
  }
  if (options_.sessions) first_step_ = step_;
  std::int64_t planned = first_step_ + steps_per_epoch * options_.epochs;
  if (options_.max_steps > 0) planned = std::min(planned, first_step_ + options_.max_steps);

  run_start_s_ = now_s();
  last_checkpoint_s_ = run_start_s_;
  const std::int64_t samples_at_start = samples_;
  obs::RunStart start{run_name_, run_dir_, header_, options_.epochs, batches_per_epoch, planned};
  for (auto& sink : sinks_) sink->on_run_start(start);

  // --- schedule: cosine/linear decay over the planned steps unless told otherwise (sessions: built once) ---
  if (!options_.sessions) schedule_ = build_schedule(planned);
  if (!pending_schedule_state_.empty()) {
    schedule_->load_state_dict(pending_schedule_state_);
    pending_schedule_state_.clear();
  }

  FitResult result;
  const std::vector<at::Tensor> params = optimizer_->parameters();
  if (param_names_.size() != params.size()) {  // the names of the optimizer's parameters, for diagnoses
    std::unordered_map<const void*, std::string> by_tensor;
    for (const auto& [name, p] : bellows::named_parameters(*model_)) by_tensor.emplace(p.unsafeGetTensorImpl(), name);
    param_names_.clear();
    for (const auto& p : params) {
      const auto it = by_tensor.find(p.unsafeGetTensorImpl());
      param_names_.push_back(it != by_tensor.end() ? it->second : fmt::format("parameter {}", param_names_.size()));
    }
  }
  dist::Strategy& strategy = *options_.strategy;
  strategy.setup(*model_, params);  // replicas equal (rank 0's weights), gradient communication attached
  const std::int64_t world = strategy.world_size();
  const std::string monitor = task_->monitor();
  Window window;
  obs::PhaseClock clock(options_.device);
  window.clock = &clock;
  obs::StepProfiler profiler(options_.profile);
  obs::FlopCounter flop_counter;
  const std::int64_t fit_first_step = step_;
  const std::int64_t skipped_at_start = precision_->skipped_steps();
  model_->train();
  bool done = step_ >= planned;
  // Out-of-memory recovery (TrainerOptions::oom_recovery). The buffers and RNG states are saved before each step.
  // With several ranks (TrainerOptions::oom_recovery_with_ranks) every rank must retry alike: their backward passes do not communicate (no_sync), and after
  // the step's micro-batches the ranks agree (one blocking all-reduce of two flags) whether any ran out of memory;
  // finish_gradients then averages the gradients. That costs the overlap of the last backward with communication.
  const bool recover = options_.oom_recovery && (world == 1 || options_.oom_recovery_with_ranks);
  const bool together = recover && world > 1;
  std::optional<StepUndo> undo;
  if (recover) undo.emplace(*model_);
  const std::int64_t recoveries_at_start = oom_recoveries_;
  oom_note_.clear();
  if (options_.oom_recovery && !recover) {
    oom_note_ = "out-of-memory recovery is off with several processes (train.oom_recovery: true turns it on; every step then waits for the "
                "ranks to agree)";
  }

  // Whole steps as CUDA graphs (TrainerOptions::compile): the step a graph captures reads `graph->inputs` and
  // writes its outputs there; warm-up steps run the same function for real.
  std::optional<GraphedStep> graph;
  if (options_.compile == "cuda_graph") {
    if (const std::string why = step_graph_problem(); !why.empty()) {
      message("compile: cuda_graph: every step runs eagerly: " + why);
    } else {
      graph.emplace();
      graph->graph = options_.step_graph_factory ? options_.step_graph_factory() : make_cuda_step_graph(options_.device);
      optimizer_->use_lr_tensor(options_.device);
      message(fmt::format("compile: cuda_graph ({}): {} warm-up steps, then step {} is captured and every later step with the same "
                          "batch shapes replays it", graph->graph->kind(), kStepGraphWarmup, step_ + kStepGraphWarmup + 1));
    }
  }
  const auto graph_body = [&] {
    StepOutput out;
    {
      auto autocast = precision_->autocast();
      out = task_->step(*model_, graph->inputs);
    }
    strategy.backward(precision_->scale_loss(out.loss));
    out.loss = out.loss.detach();
    std::tie(graph->grad_norm, graph->skipped) = optimizer_phase(params);
    graph->out = std::move(out);
    graph->param_norms = param_norms_;
    graph->grad_params = grad_params_;
  };

  for (; epoch_ < options_.epochs && !done; ++epoch_) {
    train.start_epoch(epoch_);
    window.reset(now_s(), step_, precision_->skipped_steps());
    window.epoch_start_s = window.start_s;
    while (!done) {
      const std::int64_t micro = std::min(k, train.remaining_in_epoch());
      if (micro == 0) break;

      // --- forward and backward over the micro-batches of one optimizer step ---
      lap(clock, obs::Phase::kOther);  // since the last step's optimizer: records, evaluation, checkpoints
      profiler.before_step(step_);
      // The FLOPs of one step, once, from its ops' shapes: the second step of the fit (the first warms up), or
      // the first one after a trace that covers it (one profiler at a time).
      const bool counting = options_.count_flops && flops_per_sample_ == 0 && step_ > fit_first_step && flop_counter.start();
      strategy.sync_buffers(*model_);  // rank 0's running statistics on every rank (nothing with one process)
      // Out-of-memory recovery runs the step again from its first sample: it keeps the step's loaded batches, and
      // the buffers and RNG states from before it, to put back.
      std::vector<data::Batch> loaded;
      if (recover) {
        loaded.reserve(static_cast<std::size_t>(micro));
        undo->save();
      }
      // The step's meters, added to the window once all its micro-batches ran (a retry starts them again).
      std::vector<StepOutput> outs;
      std::vector<Window::Units> units;
      std::int64_t step_samples = 0;
      bool retried = false;
      // One loaded batch as micro_split_ micro-batches. Each micro-batch loss is a batch mean: dividing by the
      // micro-batch count (each part weighted by its share of its batch) makes k batches of b samples give the
      // gradient of one batch of k*b samples.
      const auto forward_backward = [&](const data::Batch& loaded_batch, bool last_of_step) {
        const std::vector<std::int64_t> parts = data::split_sizes(loaded_batch.size, micro_split_);
        std::int64_t start = 0;
        for (std::size_t j = 0; j < parts.size(); ++j) {
          const data::Batch part = micro_split_ > 1 ? loaded_batch.slice(start, parts[j]) : loaded_batch;
          start += parts[j];
          const data::Batch b = to_device(part, options_);
          lap(clock, obs::Phase::kCopy);
          StepOutput out;
          {
            RECORD_USER_SCOPE("bellows::forward");
            auto autocast = precision_->autocast();
            out = task_->step(*model_, b);
          }
          if (options_.detect_anomaly) check_forward(b, out.loss);
          lap(clock, obs::Phase::kForward);
          {
            RECORD_USER_SCOPE("bellows::backward");
            // Accumulation micro-steps only accumulate; the last one's backward communicates (dist/strategy.h).
            std::optional<dist::Strategy::NoSync> local;
            if (together || !last_of_step || j + 1 < parts.size()) local.emplace(strategy.no_sync());
            std::optional<torch::autograd::DetectAnomalyGuard> anomaly;  // names the backward function that made a NaN
            if (options_.detect_anomaly) anomaly.emplace();
            try {
              // A part's loss weighs its share of the loaded batch: the mean over the batch, whatever the split.
              const double parts_per_step = static_cast<double>(micro) * static_cast<double>(loaded_batch.size) / static_cast<double>(parts[j]);
              strategy.backward(precision_->scale_loss(out.loss / parts_per_step));
            } catch (const c10::Error& e) {
              if (!options_.detect_anomaly || report_current_exception().out_of_memory) throw;
              BELLOWS_FAIL(ErrorKind::kData, fmt::format("non-finite values in the backward pass of optimizer step {}: {}", step_ + 1, e.what_without_backtrace()),
                           "the loss was finite: an op's gradient overflowed (lower the learning rate, clip gradients, or check the "
                           "function autograd named)");
            }
          }
          lap(clock, obs::Phase::kBackward);
          out.loss = out.loss.detach();
          outs.push_back(std::move(out));
          units.push_back(Window::units_of(b));
          step_samples += b.size;
        }
      };
      // --- or the whole step as the graph: a warm-up step, the capture and its first replay, or a replay ---
      bool graph_step = false;
      std::optional<data::Batch> preloaded;  // a batch the graph did not take: the eager step below runs it
      if (graph) {
        {
          RECORD_USER_SCOPE("bellows::data");
          preloaded = train.next();
        }
        lap(clock, obs::Phase::kData);
        BELLOWS_CHECK(preloaded.has_value(), "the data source ended before its announced batch count", "report this bug");
        const data::Batch b = to_device(*preloaded, options_);
        lap(clock, obs::Phase::kCopy);
        const bool first = graph->inputs.tensors.empty();
        const bool fits = first || same_layout(b, graph->inputs);
        if (first) {
          graph->inputs = b;
          for (auto& [name, t] : graph->inputs.tensors) t = t.clone(at::MemoryFormat::Preserve);
        } else if (fits) {
          for (auto& [name, t] : graph->inputs.tensors) t.copy_(b.tensors.at(name), /*non_blocking=*/true);
        } else if (!graph->told_layout) {
          graph->told_layout = true;
          message(fmt::format("compile: cuda_graph: optimizer step {}'s batch ({}) has other shapes than the captured one ({}): such "
                              "steps run eagerly", step_ + 1, layout_of(b), layout_of(graph->inputs)));
        }
        if (fits) {
          optimizer_->set_lr(schedule_->lr(step_));  // into the device tensor the step reads
          const std::int64_t optimizer_steps = optimizer_->steps();
          if (graph->warmed < kStepGraphWarmup) {
            graph->graph->warm_up(graph_body);
            ++graph->warmed;
            graph_step = true;
          } else {
            try {
              if (!graph->captured) {
                graph->graph->capture(graph_body);
                graph->captured = true;
              }
              graph->graph->replay();
              optimizer_->set_steps(optimizer_steps + 1);  // a replay runs no host code; the capture counted once
              graph_step = true;
            } catch (...) {
              if (graph->captured) throw;  // a replay that fails is the step's own error
              // An op the capture refused (one that reads a value back, or allocates outside the graph's pool): the
              // run goes on eagerly from this step, which did not run.
              message(fmt::format("compile: cuda_graph: capturing optimizer step {} failed ({}): this and every later step run eagerly",
                                  step_ + 1, report_current_exception().message));
              // What the capture did on the host goes: gradients, the loss scaler's step, the optimizer's count.
              optimizer_->zero_grad();
              precision_->abandon_step();
              optimizer_->set_steps(optimizer_steps);
              graph.reset();
            }
          }
        }
        if (graph_step) {
          lap(clock, obs::Phase::kForward);  // forward, backward and optimizer in one
          outs.push_back(graph->out);
          units.push_back(Window::units_of(b));
          step_samples = b.size;
          preloaded.reset();
        }
      }
      std::int64_t ran = 0;  // loaded batches of this step that ran (since the last retry)
      std::exception_ptr failed;  // together: this rank's out-of-memory error in this attempt (it runs no more micro-batches)
      const auto restart = [&] {
        ran = 0;
        outs.clear();
        units.clear();
        step_samples = 0;
        retried = true;
      };
      for (std::int64_t i = 0; i < micro && !graph_step; ++i) {
        std::optional<data::Batch> batch;
        if (preloaded) {
          batch = std::move(preloaded);
          preloaded.reset();
        } else {
          {
            RECORD_USER_SCOPE("bellows::data");
            batch = train.next();
          }
          lap(clock, obs::Phase::kData);
        }
        BELLOWS_CHECK(batch.has_value(), "the data source ended before its announced batch count", "report this bug");
        if (recover) loaded.push_back(*batch);
        while (ran <= i && !failed) {
          try {
            forward_backward(recover ? loaded[static_cast<std::size_t>(ran)] : *batch, ran + 1 == micro);
            ++ran;
          } catch (...) {
            if (together && report_current_exception().out_of_memory) {
              failed = std::current_exception();
              break;
            }
            if (!recover || !recover_from_oom(loaded[static_cast<std::size_t>(ran)], *undo)) throw;
            restart();
          }
        }
      }
      // Several ranks: whether any ran out of memory, and whether any cannot make its micro-batch smaller. Then all
      // put back the step and retry with half the micro-batch, or all stop.
      while (together) {
        const std::string problem = failed ? oom_split_problem(loaded[static_cast<std::size_t>(ran)]) : "";
        std::vector<at::Tensor> flags{at::tensor({failed ? 1.0f : 0.0f, problem.empty() ? 0.0f : 1.0f})};
        strategy.all_reduce_sum(flags);
        const float any_failed = flags[0][0].item<float>(), any_stuck = flags[0][1].item<float>();
        if (any_failed == 0) break;
        if (any_stuck > 0) {
          if (!problem.empty()) {
            oom_note_ = problem;
            std::rethrow_exception(failed);
          }
          BELLOWS_FAIL(ErrorKind::kResource,
                       fmt::format("optimizer step {}: another rank ran out of memory with a micro-batch it cannot make smaller; every rank "
                                   "stops (its report names it)", step_ + 1),
                       kOutOfMemoryHint);
        }
        split_after_oom(loaded.front().size, *undo,
                        failed ? fmt::format("on rank {}", strategy.rank()) : fmt::format("on {:.0f} other rank(s)", any_failed));
        failed = nullptr;
        restart();
        for (; ran < micro; ++ran) {
          try {
            forward_backward(loaded[static_cast<std::size_t>(ran)], ran + 1 == micro);
          } catch (...) {
            if (!report_current_exception().out_of_memory) throw;
            failed = std::current_exception();
            break;
          }
        }
      }
      for (const auto& out : outs) window.add(out);
      for (const auto& u : units) window.add_units(u);
      window.samples += step_samples * world;  // every rank takes an equal share (the sampler pads to it)
      samples_ += step_samples * world;
      batches_in_epoch_ += micro;

      // --- unscale, clip, optimizer step (skipped on the device on non-finite gradients), schedule, EMA ---
      // Nothing here waits for the device: the skip decision is a device flag the fused optimizer and the EMA
      // obey, and the host learns of a skip at the next logging boundary (emit_step).
      {
        RECORD_USER_SCOPE("bellows::optimizer");
        at::Tensor grad_norm, skipped;
        if (graph_step) {  // the graph did it: its outputs, rewritten by each replay, are read (copied) before the next
          grad_norm = graph->grad_norm;
          skipped = graph->skipped;
        } else {
          optimizer_->set_lr(schedule_->lr(step_));
          std::tie(grad_norm, skipped) = optimizer_phase(params);
        }
        ++step_;
        if (ema_) ema_->update(step_, skipped);
        accumulate(window.grad_norm_sum, at::nan_to_num(grad_norm, 0.0, 0.0, 0.0));  // finite norms only
        if (graph_step) {
          window.step_norms.emplace_back(graph->param_norms.defined() ? graph->param_norms.clone() : at::Tensor(), graph->grad_params);
        } else {
          window.step_norms.emplace_back(param_norms_, grad_params_);
        }
        if (options_.detect_anomaly) check_parameters();
      }
      lap(clock, obs::Phase::kOptimizer);
      if (counting) {
        const double flops = flop_counter.stop();  // a retried step counted its failed attempt too: the next step counts
        if (flops > 0 && step_samples > 0 && !retried) {
          flops_per_sample_ = flops / static_cast<double>(step_samples);
          message(fmt::format("model FLOPs: {:.4g} GFLOP per sample per training step, counted from the shapes of step {}'s ops "
                              "(LibTorch's profiler: matrix products, convolutions, elementwise mul/add; forward and backward)",
                              flops_per_sample_ / 1e9, step_));
        }
      }
      ++window.optimizer_calls;

      if (profiler.after_step(step_)) {
        message(fmt::format("profile: trace of {} steps written to {}", options_.profile.steps, options_.profile.path.string()));
        message(profiler.top_operators());
      }

      // --- meters, logging, evaluation, stopping ---
      const bool last_in_epoch = train.remaining_in_epoch() == 0;
      if (step_ % options_.log_every_n_steps == 0 && !last_in_epoch) {
        emit_step(window, epoch_, batches_in_epoch_, batches_per_epoch);
      }
      if (val && options_.eval_every_n_steps > 0 && step_ % options_.eval_every_n_steps == 0) {
        run_eval(*val, result, monitor);
      }
      if (step_ >= planned) done = true;
      // A background checkpoint write that has ended: a failure (disk full) stops the run at this step rather than
      // at the next checkpoint. Only a finished write is collected; the step never waits for one here.
      if (pending_write_.valid() && pending_write_.wait_for(std::chrono::seconds(0)) == std::future_status::ready) finish_checkpoint_write();
      const auto& co = options_.checkpoint;
      // Signals and clocks differ between ranks: one rank's stop request or due time is everyone's, at one step
      // (with several ranks the step after it was seen: dist/strategy.h).
      // A due time is asked for once, until a checkpoint is written.
      const bool due = co.every_n_minutes > 0 && now_s() - last_checkpoint_s_ >= 60 * co.every_n_minutes && !time_checkpoint_asked_;
      time_checkpoint_asked_ = time_checkpoint_asked_ || due;
      const std::vector<bool> agreed = strategy.agree({options_.stop_flag && options_.stop_flag->load(), due});
      const bool stop = agreed[0], by_time = agreed[1];
      if (stop) {
        result.interrupted = done = true;
        if (!co.dir.empty() && co.on_stop) result.checkpoint = save_checkpoint(&train, "stop", /*wait=*/true);
      } else if (!co.dir.empty() && !done) {
        const bool by_steps = co.every_n_steps > 0 && step_ % co.every_n_steps == 0;
        if (by_steps || by_time) result.checkpoint = save_checkpoint(&train, by_steps ? "every_n_steps" : "every_n_minutes");
      }
    }
    emit_step(window, epoch_, batches_in_epoch_, batches_per_epoch);
    if (train.remaining_in_epoch() > 0) break;  // stopped mid-epoch: by max_steps or a stop request
    for (auto& sink : sinks_) sink->on_epoch_end(epoch_, last_record_);
    if (val && options_.eval_every_n_steps == 0) run_eval(*val, result, monitor);
    batches_in_epoch_ = 0;
    ++result.epochs_completed;
  }

  if (profiler.finish()) {
    message(fmt::format("profile: the run ended while tracing; trace written to {}", options_.profile.path.string()));
    message(profiler.top_operators());
  }
  if (!result.interrupted && !options_.checkpoint.dir.empty() && options_.checkpoint.at_end) {
    result.checkpoint = save_checkpoint(&train, "end", /*wait=*/true);
  }
  finish_checkpoint_write();

  // --- summary ---
  result.steps = step_;
  result.skipped_steps = precision_->skipped_steps() - skipped_at_start;
  result.samples = samples_;
  result.new_samples = samples_ - samples_at_start;
  result.oom_recoveries = oom_recoveries_ - recoveries_at_start;
  result.micro_split = micro_split_;
  result.seconds = now_s() - run_start_s_;
  for (const auto& [name, value] : last_record_.values) {
    if (name == "loss") result.final_loss = value;
  }
  obs::RunEnd end;
  end.interrupted = result.interrupted;
  end.summary = {{"optimizer steps", std::to_string(result.steps)},
                 {"skipped steps", std::to_string(result.skipped_steps)},
                 {"epochs completed", fmt::format("{} of {}", result.epochs_completed, options_.epochs)},
                 {"samples", std::to_string(result.samples)},
                 {"wall time", fmt::format("{:.1f} s", result.seconds)},
                 {"throughput", fmt::format("{:.1f} samples/s", result.new_samples / std::max(result.seconds, 1e-9))},
                 {"final train loss", fmt::format("{:.6g}", result.final_loss)}};
  if (result.oom_recoveries > 0) {
    end.summary.emplace_back("out-of-memory recoveries",
                             fmt::format("{} (each loaded batch ran as {} micro-batches; data.batch_size / {} with train.accumulation_steps "
                                         "x {} starts there)", result.oom_recoveries, micro_split_, micro_split_, micro_split_));
  }
  if (result.last_eval) end.summary.emplace_back("last eval " + monitor, fmt::format("{:.6g}", *result.last_eval));
  if (flops_per_sample_ > 0) {
    const double per_device = flops_per_sample_ * result.new_samples / std::max(result.seconds, 1e-9) / static_cast<double>(world);
    end.summary.emplace_back("model FLOPs", fmt::format("{:.4g} GFLOP per sample (counted from op shapes)", flops_per_sample_ / 1e9));
    end.summary.emplace_back("achieved", fmt::format("{:.4g} GFLOP/s per device{}", per_device / 1e9,
                                                     options_.peak_flops_per_s > 0
                                                         ? fmt::format(" = {:.1f}% of the measured {} peak ({:.4g} GFLOP/s): MFU", 100 * per_device / options_.peak_flops_per_s,
                                                                       options_.peak_name, options_.peak_flops_per_s / 1e9)
                                                         : std::string()));
  }
  for (auto& sink : sinks_) sink->on_run_end(end);
  return result;
}

std::optional<std::int64_t> Trainer::measure_step_memory(const data::Batch& batch) {
  if (!obs::memory_stats(options_.device).tracked) return std::nullopt;
  // Everything the probe changes is put back, also when it fails (an out-of-memory trial of the batch-size finder):
  // RNG states (dropout draws), buffers (BatchNorm statistics) and gradients; the optimizer does not step.
  StepUndo undo(*model_);
  undo.save();
  const bool was_training = model_->is_training();
  model_->train();
  std::int64_t peak = 0;
  try {
    const data::Batch b = to_device(batch, options_);
    obs::reset_peak(options_.device);
    const std::int64_t base = obs::memory_stats(options_.device).current_bytes;
    StepOutput out;
    {
      auto autocast = precision_->autocast();
      out = task_->step(*model_, b);
    }
    {
      auto local = options_.strategy->no_sync();  // a probe: no gradient communication
      options_.strategy->backward(precision_->scale_loss(out.loss));
    }
    peak = obs::memory_stats(options_.device).peak_bytes - base;
  } catch (...) {
    optimizer_->zero_grad();
    undo.restore();
    model_->train(was_training);
    throw;
  }
  optimizer_->zero_grad();
  undo.restore();
  model_->train(was_training);
  obs::reset_peak(options_.device);
  return peak;
}

void Trainer::check_forward(const data::Batch& batch, const at::Tensor& loss) const {
  std::vector<std::pair<std::string, at::Tensor>> inputs(batch.tensors.begin(), batch.tensors.end());
  const std::string bad_input = first_nonfinite(inputs);
  BELLOWS_CHECK_DATA(bad_input.empty(), fmt::format("non-finite values in the batch of optimizer step {}: {}", step_ + 1, bad_input),
                     "the data has NaN or infinite values: clean them at the source (data.csv.missing for CSV files)");
  if (!first_nonfinite({{"loss", loss}}).empty()) {
    const NamedTensors params = bellows::named_parameters(*model_);
    const std::string bad_param = first_nonfinite(params);
    std::string largest;  // finite parameters that grew large overflow a forward
    double largest_abs = -1;
    for (const auto& [name, p] : params) {
      if (!at::isFloatingType(p.scalar_type()) || p.numel() == 0) continue;
      if (const double m = p.detach().abs().max().item<double>(); m > largest_abs) largest_abs = m, largest = name;
    }
    BELLOWS_FAIL(ErrorKind::kData,
                 fmt::format("non-finite loss ({}) in the forward pass of optimizer step {}: the inputs are finite, {}", loss.item<double>(), step_ + 1,
                             bad_param.empty() ? fmt::format("and so are the parameters (largest magnitude {:.3g}, in {}): the forward overflowed",
                                                             largest_abs, largest)
                                               : "the parameters are not: " + bad_param),
                 "lower the learning rate, clip gradients (train.clip_max_norm), or use fp32 if a reduced precision overflows");
  }
}

void Trainer::check_gradients() const {
  if (precision_->autocast_dtype() == at::kHalf) return;  // fp16-mixed: the loss scaler skips these steps by design
  const std::string bad = first_nonfinite(gradients_of(bellows::named_parameters(*model_)));
  BELLOWS_CHECK_DATA(bad.empty(), fmt::format("non-finite gradient after the backward pass of optimizer step {}: {}", step_ + 1, bad),
                     "the loss was finite: lower the learning rate or clip gradients (train.clip_max_norm)");
}

void Trainer::check_parameters() const {
  const std::string bad = first_nonfinite(bellows::named_parameters(*model_));
  BELLOWS_CHECK_DATA(bad.empty(), fmt::format("non-finite parameter after the optimizer of step {} (lr {:.4g}): {}", step_, optimizer_->lr(), bad),
                     "the gradients were finite: the update overflowed; lower the learning rate or check optim.eps");
}

void Trainer::run_eval(data::BatchSource& val, FitResult& result, const std::string& monitor) {
  const auto values = evaluate(val);
  obs::EvalRecord r{step_, epoch_, options_.eval_with_ema, values};
  for (auto& sink : sinks_) sink->on_eval(r);
  for (const auto& [name, value] : values) {
    if (name == monitor) {
      result.last_eval = value;
      last_eval_ = value;
      schedule_->observe_metric(value);
    }
  }
}

StateDict Trainer::state_dict() const {
  StateDict s;
  merge_prefixed(s, "optim", optimizer_->state_dict());
  merge_prefixed(s, "precision", precision_->state_dict());
  if (schedule_) merge_prefixed(s, "schedule", schedule_->state_dict());
  if (ema_) merge_prefixed(s, "ema", ema_->state_dict());
  put_int(s, "counters.step", step_);
  put_int(s, "counters.epoch", epoch_);
  put_int(s, "counters.batches_in_epoch", batches_in_epoch_);
  put_int(s, "counters.samples", samples_);
  put_int(s, "counters.micro_split", micro_split_);  // out-of-memory recovery's smaller micro-batches continue
  return s;
}

void Trainer::load_state_dict(const StateDict& state) {
  optimizer_->load_state_dict(sub_dict(state, "optim"));
  precision_->load_state_dict(sub_dict(state, "precision"));
  pending_schedule_state_ = sub_dict(state, "schedule");  // the schedule is built when fit() knows the plan
  if (schedule_ && !pending_schedule_state_.empty()) {     // sessions: built already
    schedule_->load_state_dict(pending_schedule_state_);
    pending_schedule_state_.clear();
  }
  if (ema_) ema_->load_state_dict(sub_dict(state, "ema"));
  step_ = get_int(state, "counters.step");
  epoch_ = get_int(state, "counters.epoch");
  batches_in_epoch_ = get_int(state, "counters.batches_in_epoch");
  samples_ = get_int(state, "counters.samples");
  // Checkpoints older than out-of-memory recovery have no split: whole batches.
  micro_split_ = contains(state, "counters.micro_split") ? get_int(state, "counters.micro_split") : 1;
  BELLOWS_CHECK_DATA(micro_split_ >= 1, fmt::format("the trainer state's counters.micro_split is {}, expected >= 1", micro_split_),
                     "the checkpoint's state.bin is damaged: resume from another checkpoint");
}

std::filesystem::path Trainer::save_checkpoint(data::BatchSource* train, const std::string& reason, bool wait) {
  BELLOWS_CHECK(!options_.checkpoint.dir.empty(), "save_checkpoint() without a checkpoint directory", "set CheckpointOptions::dir");
  // Replicas are equal: rank 0 writes. With other ranks it waits for the files itself, and the barrier lets no rank
  // go on, or exit, before the checkpoint is complete.
  dist::Strategy& strategy = *options_.strategy;
  std::filesystem::path path = options_.checkpoint.dir / ckpt::checkpoint_name(step_);
  if (strategy.is_main()) path = write_checkpoint(train, reason, wait || strategy.world_size() > 1);
  strategy.barrier();
  last_checkpoint_s_ = now_s();  // on every rank: the next time-based checkpoint counts from here
  time_checkpoint_asked_ = false;
  return path;
}

std::filesystem::path Trainer::write_checkpoint(data::BatchSource* train, const std::string& reason, bool wait) {
  finish_checkpoint_write();  // one write at a time; a failed one raises here
  const double start_s = now_s();
  // --- on the training thread: the host copy of everything (the only part the step waits for) ---
  ckpt::Checkpoint c;
  c.step = step_;
  c.epoch = epoch_;
  // to_host copies: the background writer reads them while training goes on.
  c.model = to_host(model_tensors(*model_));
  StateDict state = state_dict();
  // Sessions never resume a data position (each starts at its data's beginning): none is stored.
  if (train != nullptr && !options_.sessions) merge_prefixed(state, "data", train->state_dict());
  merge_prefixed(state, "rng", rng_state());
  c.state = to_host(state);
  c.info = options_.checkpoint_info;
  c.info["reason"] = reason;
  c.info["precision"] = options_.precision;
  if (options_.sessions) c.info["online"] = true;
  const std::filesystem::path path = options_.checkpoint.dir / ckpt::checkpoint_name(step_);
  // The best checkpoint by the monitored metric survives pruning; the manifest names it, so a resumed run keeps
  // protecting it (and compares later evaluations with its value, not with the last one).
  const bool lower = task_->lower_is_better();
  if (last_eval_ && (!best_eval_ || (lower ? *last_eval_ < *best_eval_ : *last_eval_ > *best_eval_))) {
    best_eval_ = last_eval_;
    best_checkpoint_ = path;
  }
  // "monitor": the metric at the last evaluation before this checkpoint; "best": the best so far and where it is.
  if (last_eval_) c.info["monitor"] = {{"name", task_->monitor()}, {"value", *last_eval_}};
  if (best_eval_) {
    c.info["best"] = {{"name", task_->monitor()}, {"value", *best_eval_}, {"lower_is_better", lower}};
    if (!best_checkpoint_.empty()) c.info["best"]["checkpoint"] = best_checkpoint_.filename().string();
  }
  std::vector<std::filesystem::path> keep;
  if (options_.checkpoint.keep_best && !best_checkpoint_.empty()) keep.push_back(best_checkpoint_);
  const double copy_ms = 1e3 * (now_s() - start_s);
  // --- on a background thread: the files, fsyncs, rename, pruning ---
  pending_write_ = std::async(std::launch::async, [c = std::move(c), dir = options_.checkpoint.dir, keep_last = options_.checkpoint.keep_last, keep] {
    const auto t0 = std::chrono::steady_clock::now();
    ckpt::save_checkpoint(dir, c);
    ckpt::prune_checkpoints(dir, keep_last, keep);
    return seconds_since(t0);
  });
  pending_note_ = fmt::format("checkpoint {} ({}, step {}): the step waited {:.1f} ms for the host copy", path.string(), reason, step_, copy_ms);
  if (wait) finish_checkpoint_write();
  return path;
}

void Trainer::finish_checkpoint_write() {
  if (!pending_write_.valid()) return;
  const double write_s = pending_write_.get();  // rethrows the writer's error (disk full, ...)
  message(fmt::format("{}; written in the background in {:.1f} ms", pending_note_, 1e3 * write_s));
}

std::vector<std::string> Trainer::restore(const ckpt::Checkpoint& c, data::BatchSource* train, bool strict) {
  std::vector<std::string> differences = load_model_tensors(*model_, c.model, strict);
  if (!differences.empty()) {
    // A partial load (strict: false, e.g. a wider head): the optimizer state and data position belong to
    // another model, so training starts fresh from the loaded weights.
    message(fmt::format("loaded the matching weights of the checkpoint; {} tensors differ: {}; optimizer, schedule and data "
                        "position start fresh", differences.size(), fmt::join(differences, "; ")));
    return differences;
  }
  StateDict state = c.state;
  const std::string saved_precision = c.info.value("precision", options_.precision);
  if (saved_precision != options_.precision) {
    // Another precision policy: its loss-scaler state does not apply; this run's policy starts fresh.
    message(fmt::format("warning: the checkpoint was written under precision {}, this run uses {}; the {} policy starts "
                        "fresh (loss scale and counters), everything else resumes", saved_precision, options_.precision, options_.precision));
    std::erase_if(state, [](const auto& kv) { return kv.first.rfind("precision.", 0) == 0; });
    merge_prefixed(state, "precision", precision_->state_dict());
  }
  load_state_dict(state);
  const bool online = c.info.value("online", false);
  if (online || options_.sessions) {
    // No data position to continue: a session's data was a stream buffer's contents. Training goes on from the
    // checkpoint's step over this run's data from its beginning, planning its epochs from there.
    epoch_ = batches_in_epoch_ = 0;
    first_step_ = step_;
    if (online && !options_.sessions) {
      message(fmt::format("the checkpoint comes from online training (sessions over a stream buffer): weights, optimizer, schedule, "
                          "EMA and the step count ({}) continue; this run's data starts at its beginning, and train.epochs and "
                          "train.max_steps count from step {}", step_, step_));
    }
  } else {
    BELLOWS_CHECK(train != nullptr, "restore() of a run's checkpoint without its data source", "pass the training loader");
    train->load_state_dict(sub_dict(c.state, "data"));
  }
  load_rng_state(sub_dict(c.state, "rng"));
  if (c.info.contains("monitor")) last_eval_ = best_eval_ = c.info["monitor"]["value"].get<double>();
  if (const auto best = c.info.find("best"); best != c.info.end() && best->is_object()) {
    if (best->contains("value") && (*best)["value"].is_number()) best_eval_ = (*best)["value"].get<double>();
    // The best checkpoint keeps its protection from pruning when this run writes into the same directory.
    if (const std::string name = best->value("checkpoint", std::string()); !name.empty()) best_checkpoint_ = options_.checkpoint.dir / name;
  }
  return differences;
}

}  // namespace bellows::train
