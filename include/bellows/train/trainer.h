// The Trainer: fits a model with a Task over a BatchSource, applying the precision policy, gradient
// accumulation, clipping, a fused optimizer, an LR schedule, EMA and freezing, and reporting to sinks.
// C++ users drive it directly (examples/cpp/custom_task); `bellows train` builds one from a config.
#pragma once

#include <torch/nn/module.h>

#include <atomic>
#include <functional>
#include <future>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "bellows/ckpt/checkpoint.h"         // defines: Checkpoint
#include "bellows/data/source.h"            // defines: BatchSource
#include "bellows/dist/strategy.h"          // defines: Strategy
#include "bellows/models/task.h"            // defines: Task
#include "bellows/obs/phase_clock.h"        // defines: PhaseClock, Phase
#include "bellows/obs/profile.h"            // defines: ProfileOptions
#include "bellows/obs/sink.h"               // defines: Sink
#include "bellows/precision/precision.h"    // defines: Precision, GradScalerOptions
#include "bellows/train/checkpointing.h"    // defines: CheckpointOptions
#include "bellows/train/fit_result.h"       // defines: FitResult
#include "bellows/train/ema.h"              // defines: Ema, EmaOptions
#include "bellows/train/optimizer.h"        // defines: Optimizer, OptimizerOptions
#include "bellows/train/schedule.h"         // defines: Schedule, ScheduleOptions
#include "bellows/train/step_graph.h"       // defines: StepGraph
#include "bellows/util/state_dict.h"        // defines: StateDict

namespace bellows::train {

struct TrainerOptions {
  c10::Device device = c10::Device(c10::kCPU);
  std::string precision = "fp32";              // fp32 | tf32 | bf16-mixed | fp16-mixed (resolved, not auto)
  precision::GradScalerOptions scaler;
  OptimizerOptions optimizer;
  ScheduleOptions schedule;                    // total_steps 0: the run's planned optimizer steps
  std::optional<EmaOptions> ema;               // absent: no EMA
  bool eval_with_ema = false;                  // evaluate with EMA weights (needs ema)
  std::vector<std::string> freeze;             // parameter name globs to freeze
  std::int64_t epochs = 1;
  std::int64_t max_steps = 0;                  // > 0: stop after this many optimizer steps
  std::int64_t accumulation_steps = 1;         // micro-batches per optimizer step
  double clip_max_norm = 0;                    // > 0: clip the global L2 norm of gradients
  double clip_value = 0;                       // > 0: clamp each gradient element to [-v, v]
  // A step whose gradients are not finite is skipped on the device (parameters, optimizer state and EMA stay as
  // they were) and reported at the next record with the step and the first parameter whose gradient was not
  // finite. Then: "stop" ends the run there with a kData error; "skip" trains on; "auto" stops unless a loss
  // scaler skips such steps by design (fp16-mixed). fp16-mixed always skips and backs off its scale.
  std::string on_nonfinite = "auto";           // auto | stop | skip
  std::int64_t log_every_n_steps = 10;
  std::int64_t eval_every_n_steps = 0;         // 0: evaluate at the end of each epoch (when a val source is given)
  bool channels_last = false;                  // 4-D parameters and inputs in NHWC memory format
  bool non_blocking = false;                   // host-to-device copies of batches (pinned memory)
  const std::atomic<bool>* stop_flag = nullptr;  // set (e.g. from a signal handler) to stop at a step boundary
  CheckpointOptions checkpoint;                // dir empty: no checkpoints
  obs::ProfileOptions profile;                 // a Chrome trace of chosen steps (off by default)
  nlohmann::json checkpoint_info = nlohmann::json::object();  // stored in each manifest (config, plan)
  // How replicas meet (dist/): null is dist::SingleDevice. With several ranks, every rank runs fit() in
  // lockstep; records, evaluation results and samples are global (summed over ranks), rank 0 alone writes
  // checkpoints, and every rank leaves save_checkpoint() once the checkpoint is complete.
  std::shared_ptr<dist::Strategy> strategy;
  // Online training (app/online.h, the C API): each fit() is a session over the data it is given (`epochs`
  // epochs of it, at most `max_steps` optimizer steps), continuing the step count, optimizer state, schedule,
  // EMA and counters of the sessions before it; a session always starts at its data's first batch. The
  // schedule is built once, here, so the step-based ones (cosine, linear) need schedule.total_steps.
  bool sessions = false;
  // FLOPs and MFU (obs/profile.h FlopCounter): the FLOPs of one training step, counted from its ops' shapes on
  // the second optimizer step of a fit (the first after a trace that covers it), per sample; each record then
  // has `gflops` (achieved per device) and, with a measured peak for the precision in use, `mfu`.
  bool count_flops = true;
  double peak_flops_per_s = 0;  // the device's matmul peak for the precision (hw/peaks.h); 0: unknown
  std::string peak_name;        // "matmul_fp32 on cpu", for the summary
  // Finds the first non-finite tensor of a training step and stops there with a kData error naming the step, the
  // phase and the tensor (seed 001's NaN hunt, PyTorch's detect_anomaly): the batch's inputs and the loss after
  // each forward, autograd's anomaly mode in backward (the backward function that made a NaN), every gradient
  // before the optimizer (not under fp16-mixed, whose loss scaler skips such steps by design) and every parameter
  // after it. A debugging mode: each check waits for the device, and anomaly mode slows backward.
  bool detect_anomaly = false;
  // Out-of-memory recovery: an out-of-memory error in a micro-batch's copy, forward or backward halves the
  // micro-batch (each loaded batch is split into 2, 4, ... parts) and so doubles the micro-batches per optimizer
  // step, and runs the step again from its first sample: the gradients, buffers (BatchNorm statistics) and RNG
  // states are put back as they were before the step, so the effective batch, the sample order and the result
  // are those of a run planned with the smaller micro-batch (fp32, CPU: bitwise). Logged, counted and kept in
  // checkpoints. A micro-batch of one sample that still fails and an error elsewhere in the step (the optimizer)
  // stop the run with the out-of-memory report (kResource). Costs a copy of the buffers and the RNG states per step
  // (to put them back). With several ranks only with oom_recovery_with_ranks: then every rank retries alike, their
  // backward passes do not communicate and the ranks agree after each step's micro-batches (a blocking all-reduce),
  // which cost 20% of the demo's samples/s on 2 CPU ranks.
  bool oom_recovery = true;
  bool oom_recovery_with_ranks = false;
  // Whole training steps as CUDA graphs (train/step_graph.h): "off" or "cuda_graph" (app resolves "auto"). With
  // cuda_graph, fit() checks step_graph_unfit (a run that cannot is trained eagerly, the first message says why),
  // runs kStepGraphWarmup steps eagerly on a side stream, captures the next one and replays it for every later step
  // whose batch has the captured shapes (a batch with other shapes, e.g. a short last batch, runs eagerly). The
  // learning rate then lives on the device (Optimizer::use_lr_tensor). In the step breakdown a replay is one
  // phase, shown as forward.
  std::string compile = "off";
  // Stands in for make_cuda_step_graph and counts as a CUDA device for step_graph_unfit: the tests pass
  // make_eager_step_graph to run everything around the graph on the CPU.
  std::function<std::unique_ptr<StepGraph>()> step_graph_factory;
};

// The conditions of step_graph_unfit that options alone decide (micro_split 1, activation checkpointing off, the
// fused optimizer unless optimizer.implementation is foreach); the trainer adds what it learns at fit().
StepGraphConditions step_graph_conditions(const TrainerOptions& options, std::int64_t world_size);

class Trainer {
 public:
  Trainer(std::shared_ptr<torch::nn::Module> model, std::shared_ptr<Task> task, TrainerOptions options);

  void add_sink(std::shared_ptr<obs::Sink> sink) { sinks_.push_back(std::move(sink)); }
  void set_header(std::vector<std::pair<std::string, std::string>> header) { header_ = std::move(header); }
  void set_run_info(std::string name, std::string dir) { run_name_ = std::move(name); run_dir_ = std::move(dir); }

  FitResult fit(data::BatchSource& train, data::BatchSource* val = nullptr);
  std::vector<std::pair<std::string, double>> evaluate(data::BatchSource& val);

  torch::nn::Module& model() { return *model_; }
  Optimizer& optimizer() { return *optimizer_; }
  precision::Precision& precision() { return *precision_; }
  Ema* ema() { return ema_.get(); }
  dist::Strategy& strategy() { return *options_.strategy; }
  const std::vector<std::string>& frozen() const { return frozen_; }

  // The peak tensor memory of one training step on `batch` (forward and backward, no optimizer step) above
  // what was held before it, on the trainer's device; weights, buffers, gradients and RNG states are left as
  // they were. std::nullopt when the device's memory is not counted (obs/memory.h).
  std::optional<std::int64_t> measure_step_memory(const data::Batch& batch);

  StateDict state_dict() const;  // optimizer, precision, schedule, EMA and counters (not the weights)
  void load_state_dict(const StateDict& state);

  // A checkpoint of everything needed to continue exactly: weights, this state_dict, the data position of
  // `train` and the RNG states, into options.checkpoint.dir (pruned to keep_last, plus the best). The
  // training thread makes host copies; a background thread writes the files (one write at a time), unless
  // `wait`. Returns the checkpoint's path. With `sessions`, no data position is stored (train may be null)
  // and the manifest says "online": true.
  std::filesystem::path save_checkpoint(data::BatchSource* train, const std::string& reason, bool wait = false);
  // Waits for a background checkpoint write; rethrows its error.
  void finish_checkpoint_write();
  // The reverse, before fit(): weights (strict: all must match, else a kData error listing the differences),
  // trainer state, the data position and the RNG states. Returns the differences when not strict. A checkpoint
  // of online training ("online" in its manifest) has no data position: fit() then plans train.epochs and
  // max_steps from its step, over `train` from the beginning; `train` may be null with `sessions`.
  std::vector<std::string> restore(const ckpt::Checkpoint& checkpoint, data::BatchSource* train, bool strict = true);

  // Each loaded batch runs as this many micro-batches (near-equal parts; the loss of each weighted as its share of
  // the batch): chosen before fit() by the batch-size finder (app/batch_size.h), doubled by out-of-memory
  // recovery, kept in checkpoints. kConfig error below 1.
  void set_micro_split(std::int64_t parts);
  std::int64_t micro_split() const { return micro_split_; }
  std::int64_t step() const { return step_; }  // optimizer steps taken, over all fit() calls and resumes
  double flops_per_sample() const { return flops_per_sample_; }  // of a training step (count_flops); 0 before counted

  // A warning or notice to every sink (console, metrics.jsonl): the run's own messages and those of whoever
  // assembled it (resume, weight imports, plan notes).
  void message(const std::string& text);

 private:
  struct Window;    // meters over one logging window
  struct StepUndo;  // the buffers and RNG states of before a step, to put back
  at::Tensor clip_gradients(const std::vector<at::Tensor>& params);  // the pre-clip norm, on the device
  // After the step's backward passes: unscale, clip, the optimizer step (skipped on the device on non-finite
  // gradients), zero_grad. Nothing waits for the device. Returns the pre-clip gradient norm and found_inf (1: skipped).
  std::pair<at::Tensor, at::Tensor> optimizer_phase(const std::vector<at::Tensor>& params);
  // Why this fit's steps cannot be CUDA graphs ("" when they can): step_graph_unfit over the options and state.
  std::string step_graph_problem() const;
  void emit_step(Window& window, std::int64_t epoch, std::int64_t batch_in_epoch, std::int64_t batches_per_epoch);
  FitResult fit_steps(data::BatchSource& train, data::BatchSource* val);  // fit() without its out-of-memory report
  void lap(obs::PhaseClock& clock, obs::Phase phase);                     // clock.lap, remembering the phase
  // After an error in a micro-batch of the loaded `batch`: when it is an out-of-memory error that a smaller
  // micro-batch can avoid, puts back the state before the step (gradients, and `undo`'s buffers and RNG states),
  // halves the micro-batch and returns true; false otherwise (the caller rethrows).
  bool recover_from_oom(const data::Batch& batch, const StepUndo& undo);
  // Why a micro-batch of the loaded `batch` cannot be made smaller ("" when it can): not splittable, or 1 sample.
  std::string oom_split_problem(const data::Batch& batch) const;
  // Puts back the state before the step and halves the micro-batch (every rank alike with several); `failed_in`
  // names where it ran out of memory ("its forward phase", "rank 1").
  void split_after_oom(std::int64_t batch_size, const StepUndo& undo, const std::string& failed_in);
  // The window's first step with non-finite gradients and the first parameter whose gradient was not finite.
  std::string first_nonfinite_step(const Window& window) const;
  void run_eval(data::BatchSource& val, FitResult& result, const std::string& monitor);
  // detect_anomaly's checks; each throws a kData error naming the first non-finite tensor.
  void check_forward(const data::Batch& batch, const at::Tensor& loss) const;
  void check_gradients() const;
  void check_parameters() const;
  // The schedule over `planned` optimizer steps (total_steps 0: those) with the mode of the task's monitor.
  std::unique_ptr<Schedule> build_schedule(std::int64_t planned);
  std::filesystem::path write_checkpoint(data::BatchSource* train, const std::string& reason, bool wait);  // this rank's

  std::shared_ptr<torch::nn::Module> model_;
  std::shared_ptr<Task> task_;
  TrainerOptions options_;
  std::unique_ptr<precision::Precision> precision_;
  std::unique_ptr<Optimizer> optimizer_;
  std::unique_ptr<Schedule> schedule_;
  std::unique_ptr<Ema> ema_;
  std::vector<std::string> frozen_;
  std::vector<std::shared_ptr<obs::Sink>> sinks_;
  std::vector<std::pair<std::string, std::string>> header_;
  std::string run_name_ = "run", run_dir_;
  std::int64_t step_ = 0;            // optimizer steps taken, skipped ones included
  std::vector<at::Tensor> grads_;    // clip_gradients' list, reused
  std::vector<std::int32_t> grad_params_;  // grads_[i] is the gradient of parameter grad_params_[i]
  at::Tensor param_norms_;           // clip_gradients' per-parameter norms [grads_.size()], on the device
  std::vector<std::string> param_names_;  // optimizer_->parameters()'s names, in its order
  bool stop_on_nonfinite_ = false;   // on_nonfinite resolved for the precision
  std::int64_t micro_split_ = 1;     // each loaded batch runs as this many micro-batches (out-of-memory recovery)
  std::int64_t oom_recoveries_ = 0;  // of this trainer, over all fit() calls
  std::string oom_note_;             // why the last out-of-memory error was not recovered from
  obs::Phase last_phase_ = obs::Phase::kOther;  // the last phase of a step that finished (out-of-memory reports)
  std::int64_t epoch_ = 0;           // current epoch
  std::int64_t batches_in_epoch_ = 0;  // batches consumed in the current epoch (for resume)
  std::int64_t samples_ = 0;
  std::int64_t first_step_ = 0;
  double flops_per_sample_ = 0;      // counted once (count_flops); 0 before      // fit() plans from here: 0, or where a session or an online checkpoint began
  double run_start_s_ = 0;
  obs::StepRecord last_record_;
  StateDict pending_schedule_state_;  // loaded before fit() builds the schedule
  std::optional<double> last_eval_;   // the monitored metric at the last evaluation
  std::optional<double> best_eval_;   // the best value of it among checkpoints written
  std::filesystem::path best_checkpoint_;
  double last_checkpoint_s_ = 0;
  bool time_checkpoint_asked_ = false;  // every_n_minutes is due and was put to the other ranks (Strategy::agree)
  std::future<double> pending_write_;  // the background checkpoint write (its seconds)
  std::string pending_note_;
};

}  // namespace bellows::train
