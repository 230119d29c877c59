// What a run reports, kept out of the training loop: the sinks (console, metrics.jsonl, TensorBoard, the user's), the
// logging window's meters summed on the device (losses, metrics, gradient norms, samples, tokens or pixels), the
// step-time breakdown by phase (obs/phase_clock.h), the FLOPs of one step and the MFU against the measured matmul
// peak, the profiler's trace window, memory, and the summary table at the end. Reading the window is the run's one
// synchronisation per record. The Trainer owns one and calls it at the points of its loop.
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "bellows/obs/phase_clock.h"       // defines: PhaseClock
#include "bellows/obs/profile.h"           // defines: StepProfiler, FlopCounter
#include "bellows/obs/sink.h"              // defines: Sink, StepRecord, EvalRecord
#include "bellows/train/fit_result.h"      // defines: FitResult
#include "bellows/train/step_runner.h"     // defines: StepResult

namespace bellows::train {

// Float64 scalars (or one-element tensors) summed over every rank and read back to the host: one collective and one
// read for all of them (records, evaluation).
std::vector<double> sums_over_ranks(dist::Strategy& strategy, const std::vector<at::Tensor>& scalars);

class Recorder {
 public:
  // The options (device, strategy, logging, profile, FLOP counting and peak) and the policy (skips, loss scale) are
  // the trainer's, which outlive the recorder.
  Recorder(const TrainerOptions& options, const precision::Precision& precision);
  ~Recorder();

  void add_sink(std::shared_ptr<obs::Sink> sink) { sinks_.push_back(std::move(sink)); }
  void set_header(std::vector<std::pair<std::string, std::string>> header) { header_ = std::move(header); }
  void set_run_info(std::string name, std::string dir) { run_name_ = std::move(name); run_dir_ = std::move(dir); }
  void message(const std::string& text);  // a warning or notice to every sink
  // Tensor memory this rank holds by category (weights, gradients, optimizer state, EMA), read at each record into
  // mem_weights_mb, mem_grads_mb, mem_optim_mb, mem_ema_mb (every rank's with several: ..._rank<r>).
  using Categories = std::array<std::int64_t, 4>;
  void set_memory_categories(std::function<Categories()> held) { categories_ = std::move(held); }

  // A fit starts at optimizer step `step` and plans to end at `planned`: the sinks hear of it; the clock, the
  // profiler and the FLOP counter start anew. `param_names`: the optimizer's parameters' names, in its order (the
  // first non-finite gradient is named by them).
  void start_fit(std::int64_t epochs, std::int64_t batches_per_epoch, std::int64_t planned, std::int64_t step,
                 std::vector<std::string> param_names);
  void start_epoch(std::int64_t step);  // a new window, and the epoch's clock
  // Before optimizer step `step` + 1 (the time since the last step's optimizer phase was "other": records,
  // evaluation, checkpoints): the profiler's window, and the FLOPs of one step, counted once from its ops' shapes (the
  // fit's second step, or the first after a trace that covers it: one profiler at a time).
  void begin_step(std::int64_t step);
  // After it (`step` steps taken, `world` ranks): its meters into the window; its optimizer phase ends here.
  void end_step(const StepResult& result, std::int64_t step, std::int64_t world);

  // Where a record is taken, and the learning rate of its last step.
  struct Position {
    std::int64_t step = 0, epoch = 0, batch_in_epoch = 0, batches_per_epoch = 0;
    double lr = 0;
  };
  // The window's record to every sink, then a new window. Returns the first step of the window that was skipped on
  // non-finite gradients and the parameter whose gradient was not (the message has gone to the sinks already), or ""
  // when none was skipped.
  std::string record(const Position& at);
  void eval(const obs::EvalRecord& record);
  void end_epoch(std::int64_t epoch);
  void end_profile();  // writes the trace if the run ends while it records
  // The fit's end: its wall time and last window's loss into `result`, and the summary table to every sink. `epochs`:
  // as planned; `monitor`: the name of the task's monitored metric; `micro_split`: each loaded batch's parts.
  void end_fit(FitResult& result, std::int64_t epochs, const std::string& monitor, std::int64_t micro_split);

  obs::PhaseClock& clock() { return *clock_; }  // the fit's (from start_fit)
  // The largest tensor memory peak of the steps' phases (data to optimizer) since the fit began; -1 when not counted.
  std::int64_t training_peak() const;
  // Closes the clock's current lap as "other" (what lies between steps), so the memory peak so far stays the window's
  // and the next peak counter starts at zero: around a checkpoint. Nothing before the first fit.
  void lap_between_steps();
  void checkpoint(const obs::CheckpointRecord& record);  // to every sink
  obs::Phase last_phase() const { return clock_ ? clock_->last() : obs::Phase::kOther; }
  double flops_per_sample() const { return flops_per_sample_; }  // of a training step (count_flops); 0 before counted
  // The training loss of the last record (a checkpoint stores it), and the one a resumed checkpoint stored: the
  // summary's final train loss when this fit records none (a resumed run that was complete).
  std::optional<double> last_loss() const;
  void set_resumed_loss(double loss) { resumed_loss_ = loss; }

 private:
  struct Window;  // sums over one logging window, on the device
  struct MemoryReading;
  std::string first_skipped_step() const;
  // The steps of record()'s story (recorder.cpp).
  obs::StepRecord timing_record(const Position& at, double t) const;
  MemoryReading read_memory();
  void add_rank_memory(std::vector<at::Tensor>& parts, const MemoryReading& m) const;
  void add_task_values(obs::StepRecord& r, const std::vector<double>& sum, std::size_t per_rank_at, double t) const;
  std::string note_skipped(const Position& at);
  void add_memory_values(obs::StepRecord& r, const MemoryReading& m, const std::vector<double>& sum, std::size_t per_rank_at) const;
  void add_speed_values(obs::StepRecord& r);

  const TrainerOptions& options_;
  const precision::Precision& precision_;
  std::vector<std::shared_ptr<obs::Sink>> sinks_;
  std::vector<std::pair<std::string, std::string>> header_;
  std::string run_name_ = "run", run_dir_;
  std::unique_ptr<Window> window_;
  std::function<Categories()> categories_;
  std::unique_ptr<obs::PhaseClock> clock_;
  std::int64_t training_peak_ = -1;  // the largest phase peak (data to optimizer) at the records so far
  std::unique_ptr<obs::StepProfiler> profiler_;
  obs::FlopCounter flop_counter_;
  bool counting_ = false;        // the step being run is having its FLOPs counted
  bool flops_counted_ = false;   // a step's count is done (flops_per_sample_ 0: none of its ops counts)
  double flops_per_sample_ = 0;
  std::vector<std::string> param_names_;
  std::int64_t fit_first_step_ = 0;
  double run_start_s_ = 0;
  obs::StepRecord last_record_;
  std::optional<double> resumed_loss_;
};

}  // namespace bellows::train
