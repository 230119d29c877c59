// What a run reports; see recorder.h.
#include "bellows/train/recorder.h"

#include <ATen/ATen.h>
#include <fmt/format.h>

#include <optional>

#include <array>
#include <chrono>
#include <cmath>

#include "bellows/dist/strategy.h"
#include "bellows/obs/memory.h"
#include "bellows/precision/precision.h"
#include "bellows/util/format.h"  // defines: percent_text
#include "bellows/util/timer.h"   // defines: now_s

namespace bellows::train {
namespace {

// sum += value, on the device; the first value is copied (it may alias a tensor the step still uses).
void accumulate(at::Tensor& sum, const at::Tensor& value) {
  if (sum.defined()) sum.add_(value);
  else sum = value.clone();
}

}  // namespace

std::vector<double> sums_over_ranks(dist::Strategy& strategy, const std::vector<at::Tensor>& scalars) {
  std::vector<at::Tensor> parts;
  for (const auto& t : scalars) parts.push_back(t.to(at::kDouble).reshape({1}));
  std::vector<at::Tensor> packed{at::cat(parts)};
  strategy.all_reduce_sum(packed);
  const at::Tensor host = packed[0].cpu();
  return {host.data_ptr<double>(), host.data_ptr<double>() + host.numel()};
}

// Sums over one logging window, kept as device tensors so that a record is the only synchronisation: the losses and
// metrics, the finite gradient norms, the tokens or pixels, and the skip count at the window's start.
struct Recorder::Window {
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
  std::string unit;                  // "tokens", "pixels", or "" (neither)
  double units = 0;                  // counted on the host
  at::Tensor units_on_device;        // counted on the device (masked tokens)
  // Each optimizer step's per-parameter gradient norms (on the device, no extra op: the optimizer phase makes them)
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
  void add_units(const BatchUnits& u) {
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

Recorder::Recorder(const TrainerOptions& options, const precision::Precision& precision)
    : options_(options), precision_(precision), window_(std::make_unique<Window>()) {}

Recorder::~Recorder() = default;

std::int64_t Recorder::training_peak() const {
  std::int64_t peak = training_peak_;
  if (clock_) {
    const auto& now = clock_->memory_so_far();
    for (std::size_t i = 0; i < obs::kPhases; ++i) {
      if (i != static_cast<std::size_t>(obs::Phase::kOther)) peak = std::max(peak, now[i]);
    }
  }
  return peak;
}

void Recorder::lap_between_steps() {
  if (clock_) clock_->lap(obs::Phase::kOther);
}

void Recorder::checkpoint(const obs::CheckpointRecord& record) {
  for (auto& sink : sinks_) sink->on_checkpoint(record);
}

void Recorder::message(const std::string& text) {
  for (auto& sink : sinks_) sink->on_message(text);
}

void Recorder::start_fit(std::int64_t epochs, std::int64_t batches_per_epoch, std::int64_t planned, std::int64_t step,
                         std::vector<std::string> param_names) {
  run_start_s_ = now_s();
  const obs::RunStart start{run_name_, run_dir_, header_, epochs, batches_per_epoch, planned};
  for (auto& sink : sinks_) sink->on_run_start(start);
  clock_ = std::make_unique<obs::PhaseClock>(options_.device);
  profiler_ = std::make_unique<obs::StepProfiler>(options_.profile);
  param_names_ = std::move(param_names);
  fit_first_step_ = step;
}

void Recorder::start_epoch(std::int64_t step) {
  window_->reset(now_s(), step, precision_.skipped_steps());
  window_->epoch_start_s = window_->start_s;
  // What came before the window (an epoch-end evaluation, the loader's new epoch) is not in its step time: nor in
  // its phases.
  clock_->mark();
}

void Recorder::begin_step(std::int64_t step) {
  clock_->lap(obs::Phase::kOther);  // since the last step's optimizer: records, evaluation, checkpoints
  profiler_->before_step(step);
  counting_ = options_.count_flops && !flops_counted_ && step > fit_first_step_ && flop_counter_.start();
}

void Recorder::end_step(const StepResult& r, std::int64_t step, std::int64_t world) {
  Window& w = *window_;
  for (const auto& out : r.outputs) w.add(out);
  for (const auto& u : r.units) w.add_units(u);
  w.samples += r.samples * world;  // every rank takes an equal share (the sampler pads to it)
  accumulate(w.grad_norm_sum, at::nan_to_num(r.gradients.norm, 0.0, 0.0, 0.0));  // finite norms only
  w.step_norms.emplace_back(r.gradients.param_norms, r.gradients.owners);
  clock_->lap(obs::Phase::kOptimizer);
  if (counting_) {
    counting_ = false;
    const double flops = flop_counter_.stop();  // a repeated step counted its failed attempt too: the next step counts
    if (r.samples > 0 && !r.repeated) {
      flops_counted_ = true;  // once: a model none of whose ops counts is not profiled at every step
      flops_per_sample_ = flops / static_cast<double>(r.samples);
      message(flops > 0 ? fmt::format("model FLOPs: {:.4g} GFLOP per sample per training step, counted from the shapes of step {}'s ops "
                                       "(LibTorch's profiler and bellows' formulas: matrix products, convolutions, attention, "
                                       "elementwise mul/add; forward and backward)", flops_per_sample_ / 1e9, step)
                        : fmt::format("model FLOPs: not counted: none of step {}'s ops has a FLOP formula (matrix products, "
                                      "convolutions, attention, elementwise mul/add); no GFLOP/s or MFU is reported", step));
    }
  }
  ++w.optimizer_calls;
  if (profiler_->after_step(step)) {
    message(fmt::format("profile: trace of {} steps written to {}", options_.profile.steps, options_.profile.path.string()));
    message(profiler_->top_operators());
  }
}

// What a record reads of memory (seeds 003, 004): tensor memory on the device now and at its peak over the window, the
// peak by phase, the process's resident memory, and what this rank holds by category.
struct Recorder::MemoryReading {
  static constexpr std::array<const char*, 4> kCategory = {"weights", "grads", "optim", "ema"};
  static constexpr std::size_t kPerRank = 3 + kCategory.size();  // the numbers each rank adds to the window's sums
  obs::MemoryStats mem;
  std::int64_t peak = 0;
  std::array<std::int64_t, obs::kPhases> phase_peaks{};
  obs::ProcessMemory proc;
  Categories held{};
};

std::string Recorder::record(const Position& at) {
  Window& w = *window_;
  if (w.micro_batches == 0) return "";
  const double t = now_s();
  // The window ends here for the phases as for its wall time: what ran since the last step (an evaluation before
  // this record) is `other`; the rest of this record and what follows it go to the next window's `other`.
  clock_->lap(obs::Phase::kOther);
  obs::StepRecord r = timing_record(at, t);
  // --- the window's one synchronisation: its sums (over every rank) and skip count come back from the device ---
  std::vector<at::Tensor> parts{w.loss_sum};
  for (const auto& [name, sum] : w.metric_sums) parts.push_back(sum);
  if (w.units_on_device.defined()) parts.push_back(w.units_on_device);  // read with the rest: no extra sync
  // Memory now, before the sums, so that every rank's travels with them.
  const MemoryReading memory = read_memory();
  const std::size_t per_rank_at = parts.size();
  add_rank_memory(parts, memory);
  const std::vector<double> sum = sums_over_ranks(*options_.strategy, parts);
  add_task_values(r, sum, per_rank_at, t);
  const std::string first_skipped = note_skipped(at);
  for (const auto& m : precision_.metrics()) r.values.push_back(m);
  for (const auto& m : options_.strategy->metrics()) r.values.push_back(m);  // communication time, with several ranks
  add_memory_values(r, memory, sum, per_rank_at);
  add_speed_values(r);
  for (auto& sink : sinks_) sink->on_step(r);
  last_record_ = r;
  w.reset(t, at.step, precision_.skipped_steps());  // keeps epoch_start_s
  return first_skipped;
}

// The record's position and the window's time and throughput, at `t`.
obs::StepRecord Recorder::timing_record(const Position& at, double t) const {
  const Window& w = *window_;
  obs::StepRecord r;
  r.step = at.step;
  r.epoch = at.epoch;
  r.batch_in_epoch = at.batch_in_epoch;
  r.batches_per_epoch = at.batches_per_epoch;
  r.elapsed_s = t - run_start_s_;
  r.epoch_elapsed_s = t - w.epoch_start_s;
  r.samples_per_s = w.samples / std::max(t - w.start_s, 1e-9);
  r.step_time_ms = 1000.0 * (t - w.start_s) / std::max<std::int64_t>(w.optimizer_calls, 1);
  r.lr = at.lr;
  return r;
}

Recorder::MemoryReading Recorder::read_memory() {
  MemoryReading m;
  m.mem = obs::memory_stats(options_.device);
  m.peak = m.mem.peak_bytes;  // since the clock's last lap; the window's is the largest of its phases'
  m.phase_peaks.fill(-1);
  if (m.mem.tracked) {
    m.phase_peaks = clock_->take_memory();
    for (const std::int64_t p : m.phase_peaks) m.peak = std::max(m.peak, p);
    for (std::size_t i = 0; i < obs::kPhases; ++i) {  // the steps' own phases: what a checkpoint is compared with
      if (i != static_cast<std::size_t>(obs::Phase::kOther)) training_peak_ = std::max(training_peak_, m.phase_peaks[i]);
    }
    obs::reset_peak(options_.device);
  }
  m.proc = obs::process_memory();
  m.held = m.mem.tracked && categories_ ? categories_() : Categories{-1, -1, -1, -1};
  return m;
}

// With several ranks, seven numbers per rank join the window's sums (tensor memory now and at its peak, resident
// memory, and what it holds by category), each rank's at its place and zeros elsewhere.
void Recorder::add_rank_memory(std::vector<at::Tensor>& parts, const MemoryReading& m) const {
  const dist::Strategy& strategy = *options_.strategy;
  if (strategy.world_size() <= 1) return;
  const at::TensorOptions f64 = at::TensorOptions().dtype(at::kDouble).device(window_->loss_sum.device());
  for (int rank = 0; rank < strategy.world_size(); ++rank) {
    const bool mine = rank == strategy.rank();
    parts.push_back(at::full({}, mine && m.mem.tracked ? static_cast<double>(m.mem.current_bytes) : 0.0, f64));
    parts.push_back(at::full({}, mine && m.mem.tracked ? static_cast<double>(m.peak) : 0.0, f64));
    parts.push_back(at::full({}, mine && m.proc.rss_bytes >= 0 ? static_cast<double>(m.proc.rss_bytes) : 0.0, f64));
    for (const std::int64_t bytes : m.held) parts.push_back(at::full({}, mine ? static_cast<double>(bytes) : 0.0, f64));
  }
}

// The loss and the task's metrics (means over the window's micro-batches on every rank), the tokens or pixels per
// second, the mean gradient norm.
void Recorder::add_task_values(obs::StepRecord& r, const std::vector<double>& sum, std::size_t per_rank_at, double t) const {
  const Window& w = *window_;
  const dist::Strategy& strategy = *options_.strategy;
  const double n = static_cast<double>(w.micro_batches) * strategy.world_size();
  r.values.emplace_back("loss", sum[0] / n);
  for (std::size_t i = 0; i < w.metric_sums.size(); ++i) r.values.emplace_back(w.metric_sums[i].first, sum[i + 1] / n);
  r.task_values = r.values.size();
  if (!w.unit.empty()) {  // every rank's share: host counts times the ranks, device counts summed over them
    const double units =
        w.units * static_cast<double>(strategy.world_size()) + (w.units_on_device.defined() ? sum[per_rank_at - 1] : 0.0);
    r.values.emplace_back(w.unit + "_per_s", units / std::max(t - w.start_s, 1e-9));
  }
  const double norm_sum = w.grad_norm_sum.defined() ? w.grad_norm_sum.item<double>() : 0.0;
  r.values.emplace_back("grad_norm", norm_sum / std::max<std::int64_t>(w.optimizer_calls, 1));
}

// The window's skipped steps, said in a message; returns the first one's description ("" when none was skipped).
std::string Recorder::note_skipped(const Position& at) {
  const Window& w = *window_;
  const std::int64_t skipped = precision_.skipped_steps();
  if (skipped <= w.skipped_before) return "";
  const std::string first_skipped = first_skipped_step();
  message(fmt::format("{} of optimizer steps {}-{} skipped: non-finite gradients ({}); parameters, optimizer state and EMA are "
                      "unchanged by them (the step count and the schedule advance, as in PyTorch)",
                      skipped - w.skipped_before, w.first_step + 1, at.step, first_skipped));
  return first_skipped;
}

// Memory monitoring, read before the sums: this rank's, then with several ranks every other rank's.
void Recorder::add_memory_values(obs::StepRecord& r, const MemoryReading& m, const std::vector<double>& sum,
                                 std::size_t per_rank_at) const {
  const auto& category = MemoryReading::kCategory;
  if (m.mem.tracked) {
    for (std::size_t i = 0; i < obs::kPhases; ++i) {
      if (m.phase_peaks[i] < 0) continue;
      r.phase_mem_mb.emplace_back(obs::phase_name(static_cast<obs::Phase>(i)), static_cast<double>(m.phase_peaks[i]) / 1e6);
    }
    r.values.emplace_back("mem_mb", static_cast<double>(m.mem.current_bytes) / 1e6);
    r.values.emplace_back("mem_peak_mb", static_cast<double>(m.peak) / 1e6);
    for (std::size_t k = 0; k < category.size(); ++k) {
      if (m.held[k] >= 0) r.values.emplace_back(fmt::format("mem_{}_mb", category[k]), static_cast<double>(m.held[k]) / 1e6);
    }
    if (m.mem.reserved_bytes >= 0) r.values.emplace_back("mem_reserved_mb", static_cast<double>(m.mem.reserved_bytes) / 1e6);
  }
  if (m.proc.rss_bytes >= 0) {
    r.values.emplace_back("rss_mb", static_cast<double>(m.proc.rss_bytes) / 1e6);
    r.values.emplace_back("rss_peak_mb", static_cast<double>(m.proc.peak_rss_bytes) / 1e6);
  }
  for (int rank = 1; rank < options_.strategy->world_size(); ++rank) {
    const std::size_t at_rank = per_rank_at + MemoryReading::kPerRank * static_cast<std::size_t>(rank);
    if (m.mem.tracked) {
      r.values.emplace_back(fmt::format("mem_mb_rank{}", rank), sum[at_rank] / 1e6);
      r.values.emplace_back(fmt::format("mem_peak_mb_rank{}", rank), sum[at_rank + 1] / 1e6);
      for (std::size_t k = 0; k < category.size(); ++k) {
        if (m.held[k] >= 0) r.values.emplace_back(fmt::format("mem_{}_mb_rank{}", category[k], rank), sum[at_rank + 3 + k] / 1e6);
      }
    }
    if (m.proc.rss_bytes >= 0) r.values.emplace_back(fmt::format("rss_mb_rank{}", rank), sum[at_rank + 2] / 1e6);
  }
}

// Achieved FLOP/s per device and MFU against the measured matmul peak of the precision in use; where the window's
// time went, per optimizer step (obs/phase_clock.h), read after the sync.
void Recorder::add_speed_values(obs::StepRecord& r) {
  if (flops_per_sample_ > 0) {
    const double per_device = flops_per_sample_ * r.samples_per_s / static_cast<double>(options_.strategy->world_size());
    r.values.emplace_back("gflops", per_device / 1e9);
    if (options_.peak_flops_per_s > 0) r.values.emplace_back("mfu", per_device / options_.peak_flops_per_s);
  }
  const std::array<double, obs::kPhases> ms = clock_->take();
  for (std::size_t i = 0; i < obs::kPhases; ++i) {
    r.phase_ms.emplace_back(obs::phase_name(static_cast<obs::Phase>(i)), ms[i] / std::max<std::int64_t>(window_->optimizer_calls, 1));
  }
}

std::string Recorder::first_skipped_step() const {
  const Window& w = *window_;
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

void Recorder::eval(const obs::EvalRecord& record) {
  for (auto& sink : sinks_) sink->on_eval(record);
}

void Recorder::end_epoch(std::int64_t epoch) {
  for (auto& sink : sinks_) sink->on_epoch_end(epoch, last_record_);
}

void Recorder::end_profile() {
  if (profiler_ && profiler_->finish()) {
    message(fmt::format("profile: the run ended while tracing; trace written to {}", options_.profile.path.string()));
    message(profiler_->top_operators());
  }
}

std::optional<double> Recorder::last_loss() const {
  for (const auto& [name, value] : last_record_.values) {
    if (name == "loss") return value;
  }
  return resumed_loss_;
}

void Recorder::end_fit(FitResult& result, std::int64_t epochs, const std::string& monitor, std::int64_t micro_split) {
  result.seconds = now_s() - run_start_s_;
  const std::optional<double> loss = last_loss();
  result.final_loss = loss.value_or(0.0);
  obs::RunEnd end;
  end.interrupted = result.interrupted;
  if (result.already_complete) {
    end.summary.emplace_back("already complete", fmt::format("the checkpoint resumed is at optimizer step {}, where train.epochs and train.max_steps end "
                                                             "the run: nothing was trained (raise them to train on)", result.steps));
  }
  const std::vector<std::pair<std::string, std::string>> counts = {
      {"optimizer steps", std::to_string(result.steps)},
      {"skipped steps", std::to_string(result.skipped_steps)},
      {"epochs completed", fmt::format("{} of {}", result.epochs_in_all, epochs)},
      {"samples", std::to_string(result.samples)},
      {"wall time", fmt::format("{:.1f} s", result.seconds)},
      {"throughput", result.new_samples > 0 ? fmt::format("{:.1f} samples/s", result.new_samples / std::max(result.seconds, 1e-9)) : "no samples trained"},
      {"final train loss", loss ? fmt::format("{:.6g}", *loss) : "not recorded (a checkpoint older than this record)"}};
  end.summary.insert(end.summary.end(), counts.begin(), counts.end());
  if (result.oom_recoveries > 0) {
    end.summary.emplace_back("out-of-memory recoveries",
                             fmt::format("{} (each loaded batch ran as {} micro-batches; data.batch_size / {} with train.accumulation_steps "
                                         "x {} starts there)", result.oom_recoveries, micro_split, micro_split, micro_split));
  }
  if (result.last_eval) end.summary.emplace_back("last eval " + monitor, fmt::format("{:.6g}", *result.last_eval));
  if (flops_per_sample_ > 0) {
    const double world = static_cast<double>(options_.strategy->world_size());
    const double per_device = flops_per_sample_ * result.new_samples / std::max(result.seconds, 1e-9) / world;
    end.summary.emplace_back("model FLOPs", fmt::format("{:.4g} GFLOP per sample (counted from op shapes)", flops_per_sample_ / 1e9));
    end.summary.emplace_back("achieved", fmt::format("{:.4g} GFLOP/s per device{}", per_device / 1e9,
                                                     options_.peak_flops_per_s > 0
                                                         ? fmt::format(" = {} of the measured {} peak ({:.4g} GFLOP/s): MFU",
                                                                       percent_text(per_device / options_.peak_flops_per_s),
                                                                       options_.peak_name, options_.peak_flops_per_s / 1e9)
                                                         : std::string()));
  } else if (flops_counted_) {
    end.summary.emplace_back("model FLOPs", "not counted (none of the step's ops has a FLOP formula): no GFLOP/s or MFU");
  }
  for (auto& sink : sinks_) sink->on_run_end(end);
}

}  // namespace bellows::train
