// The Trainer: fits a model with a Task over a BatchSource, applying the precision policy, gradient
// accumulation, clipping, a fused optimizer, an LR schedule, EMA and freezing, and reporting to sinks.
// C++ users drive it directly (examples/cpp/custom_task); `bellows train` builds one from a config.
// Its loop (Trainer::fit, src/train/trainer.cpp) is the story of a run; how a step runs is a StepRunner's
// (train/step_runner.h), what is reported the Recorder's (train/recorder.h), when checkpoints are written the
// CheckpointKeeper's (train/checkpoint_keeper.h).
#pragma once

#include <torch/nn/module.h>

#include <filesystem>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "bellows/ckpt/checkpoint.h"         // defines: Checkpoint
#include "bellows/data/source.h"            // defines: BatchSource
#include "bellows/dist/strategy.h"          // defines: Strategy
#include "bellows/models/task.h"            // defines: Task
#include "bellows/obs/memory.h"             // defines: MemoryStats
#include "bellows/obs/sink.h"               // defines: Sink, CheckpointRecord
#include "bellows/precision/precision.h"    // defines: Precision
#include "bellows/train/ema.h"              // defines: Ema
#include "bellows/train/fit_result.h"       // defines: FitResult
#include "bellows/train/optimizer.h"        // defines: Optimizer
#include "bellows/train/schedule.h"         // defines: Schedule
#include "bellows/train/step_runner.h"      // defines: MicroSplit
#include "bellows/train/trainer_options.h"  // defines: TrainerOptions
#include "bellows/util/state_dict.h"        // defines: StateDict

namespace bellows::train {

class Recorder;
class CheckpointKeeper;

class Trainer {
 public:
  Trainer(std::shared_ptr<torch::nn::Module> model, std::shared_ptr<Task> task, TrainerOptions options);
  ~Trainer();
  Trainer(const Trainer&) = delete;
  Trainer& operator=(const Trainer&) = delete;

  void add_sink(std::shared_ptr<obs::Sink> sink);
  void set_header(std::vector<std::pair<std::string, std::string>> header);  // machine and plan lines, printed at start
  void set_run_info(std::string name, std::string dir);
  // A plan row decided while training (compile: auto's measured choice): (key, value, reason). The app rewrites
  // plan.json with it; without one the row is only a message.
  using PlanRevision = std::function<void(const std::string& key, const std::string& value, const std::string& reason)>;
  void set_plan_revision(PlanRevision revise) { plan_revision_ = std::move(revise); }

  FitResult fit(data::BatchSource& train, data::BatchSource* val = nullptr);
  std::vector<std::pair<std::string, double>> evaluate(data::BatchSource& val);

  torch::nn::Module& model() { return *model_; }
  Optimizer& optimizer() { return *optimizer_; }  // under zero1: this rank's share of the parameters
  const std::vector<at::Tensor>& trainable() const { return params_; }  // every trainable parameter
  precision::Precision& precision() { return *precision_; }
  Ema* ema() { return ema_.get(); }
  dist::Strategy& strategy() { return *options_.strategy; }
  const std::vector<std::string>& frozen() const { return frozen_; }

  // The peak tensor memory of one training step on `batch` (forward and backward, no optimizer step) above
  // what was held before it, on the trainer's device; weights, buffers, gradients and RNG states are left as
  // they were. std::nullopt when the device's memory is not counted (obs/memory.h).
  std::optional<std::int64_t> measure_step_memory(const data::Batch& batch);
  // Tensor memory held now, bytes: weights (parameters and buffers), gradients, optimizer state, EMA (the step
  // records' categories). Each storage once: ddp's gradients are views of its buckets, a released fsdp weight holds
  // nothing.
  std::array<std::int64_t, 4> held_by_category() const;

  StateDict state_dict() const;  // optimizer (this rank's under zero1), precision, schedule, EMA and counters (not the weights)
  void load_state_dict(const StateDict& state);

  // A checkpoint of everything needed to continue exactly: weights, this state_dict, the data position of
  // `train` and the RNG states, into options.checkpoint.dir (pruned to keep_last, plus the best). The
  // training thread makes host copies; a background thread writes the files (one write at a time), unless
  // `wait`. Returns the checkpoint's path. With `sessions`, no data position is stored (train may be null)
  // and the manifest says "online": true.
  std::filesystem::path save_checkpoint(data::BatchSource* train, const std::string& reason, bool wait = false);
  // Waits for a background checkpoint write; rethrows its error.
  void finish_checkpoint_write();
  // `value` under `key` in every later checkpoint's manifest info (online training's session count, ...).
  void note_in_checkpoints(const std::string& key, nlohmann::json value) { options_.checkpoint_info[key] = std::move(value); }
  // The reverse, before fit(): weights (strict: all must match, else a kData error listing the differences),
  // trainer state, the data position and the RNG states. Returns the differences when not strict. A checkpoint
  // of online training ("online" in its manifest) has no data position: fit() then plans train.epochs and
  // max_steps from its step, over `train` from the beginning; `train` may be null with `sessions`.
  std::vector<std::string> restore(const ckpt::Checkpoint& checkpoint, data::BatchSource* train, bool strict = true);

  // Each loaded batch runs as this many micro-batches (near-equal parts; the loss of each weighted as its share of
  // the batch): chosen before fit() by the batch-size finder (app/batch_size.h), doubled by out-of-memory
  // recovery, kept in checkpoints. kConfig error below 1.
  void set_micro_split(std::int64_t parts);
  std::int64_t micro_split() const { return split_.parts; }
  std::int64_t step() const { return step_; }  // optimizer steps taken, over all fit() calls and resumes
  double flops_per_sample() const;             // of a training step (count_flops); 0 before counted

  // A warning or notice to every sink (console, metrics.jsonl): the run's own messages and those of whoever
  // assembled it (resume, weight imports, plan notes).
  void message(const std::string& text);

 private:
  FitResult fit_steps(data::BatchSource& train, data::BatchSource* val);  // fit() without its out-of-memory report
  // The steps of fit_steps' story (trainer.cpp).
  struct FitPlan;
  FitPlan plan_fit(data::BatchSource& train);
  void start_fit(const FitPlan& plan);
  void run_step(StepRunner& runner, data::BatchSource& train, std::int64_t batches);
  bool after_step(data::BatchSource& train, data::BatchSource* val, const FitPlan& plan, FitResult& result);
  void finish_fit(data::BatchSource& train, const FitPlan& plan, FitResult& result);
  StepParts step_parts();
  // What fit() does with an error (`error`; an out-of-memory error already worded): where the state is that of a
  // completed step not yet on disk (the error came in its records or evaluation, not inside a step or a checkpoint's
  // write) and one process trains, writes that step's checkpoint first, so no finished step is lost, and says so
  // in the error's message. Rethrows.
  [[noreturn]] void fail_after_saving(data::BatchSource& train, std::exception_ptr error);
  // The schedule over `planned` optimizer steps (total_steps 0: those) with the mode of the task's monitor.
  std::unique_ptr<Schedule> build_schedule(std::int64_t planned);
  void run_eval(data::BatchSource& val, FitResult& result);
  // The window's record; on_nonfinite stop ends the run after it when one of its steps was skipped.
  void record(std::int64_t batches_per_epoch);
  bool stop_requested() const { return options_.stop_flag != nullptr && options_.stop_flag->load(); }
  // What a checkpoint of now holds, as host copies: weights, state_dict, the data position of `train`, RNG states.
  // optimizer_state: the optimizer entries to store instead of this rank's own (a sharded optimizer's, gathered).
  ckpt::Checkpoint snapshot(data::BatchSource* train, const StateDict* optimizer_state = nullptr, const StateDict* ema_state = nullptr) const;

  // This rank's share of a sharded checkpoint (ckpt/sharded.h): what it writes; `copy`: as host copies.
  ckpt::Checkpoint share(data::BatchSource* train, bool copy) const;
  nlohmann::json checkpoint_info() const;
  // The checkpoint's record to the sinks: every rank's memory held before it (`before`), its peak while written
  // (`peak`) and the training steps' peak (one collective).
  void record_checkpoint(obs::CheckpointRecord record, const obs::MemoryStats& before, std::int64_t peak);  // the manifest's info: the run's, the precision, the last loss, online

  std::vector<int> owners_;  // per trainable parameter: the rank that writes it into a sharded checkpoint
  bool ema_share_ = false;   // the EMA averages this rank's share of the weights (fsdp), not all of them

  std::shared_ptr<torch::nn::Module> model_;
  std::shared_ptr<Task> task_;
  TrainerOptions options_;
  std::unique_ptr<precision::Precision> precision_;
  std::unique_ptr<Optimizer> optimizer_;
  std::unique_ptr<Schedule> schedule_;
  std::unique_ptr<Ema> ema_;
  std::vector<std::string> frozen_;
  std::unique_ptr<Recorder> recorder_;
  std::unique_ptr<CheckpointKeeper> keeper_;
  std::vector<at::Tensor> params_;   // the trainable parameters, in the optimizer's order (under zero1 the
                                     // optimizer updates this rank's share of them)
  MicroSplit split_;                 // each loaded batch runs as split_.parts micro-batches (out-of-memory recovery)
  bool stop_on_nonfinite_ = false;   // on_nonfinite resolved for the precision
  std::int64_t step_ = 0;            // optimizer steps taken, skipped ones included
  std::int64_t epoch_ = 0;           // current epoch
  std::int64_t batches_in_epoch_ = 0;  // batches consumed in the current epoch (for resume)
  std::int64_t samples_ = 0;
  std::int64_t first_step_ = 0;      // fit() plans from here: 0, or where a session or an online checkpoint began
  bool mid_step_ = false;            // a step or a checkpoint's write is under way: the state is no step's to save
  std::int64_t saved_step_ = -1;     // the step of the newest checkpoint written or resumed from
  StateDict pending_schedule_state_;  // loaded before fit() builds the schedule
  PlanRevision plan_revision_;
};

}  // namespace bellows::train
