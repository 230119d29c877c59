// How one optimizer step runs: the seam between the training loop and the ways a step can be executed. The loop
// hands a StepRunner the step's loaded batches and gets back what the step did: each micro-batch's loss and
// metrics, the samples, the gradient norm and whether the optimizer skipped the update. It never knows which runner
// it has:
//   EagerStep (train/eager_step.h)           forward and backward over the micro-batches, then the optimizer phase;
//   RecoveringStep (train/recovering_step.h) an EagerStep that, on an out-of-memory error, puts the step back,
//                                            halves the micro-batch and runs the step again (every rank alike);
//   GraphStep (train/graph_step.h)           whole steps as CUDA graphs: warm-up, capture, replay, and eager steps
//                                            (with the reason) for batches of other shapes and after a failed capture.
// make_step_runner stacks them as the trainer's options and state ask.
#pragma once

#include <ATen/core/Tensor.h>
#include <torch/nn/module.h>

#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "bellows/data/batch.h"              // defines: Batch
#include "bellows/data/source.h"             // defines: BatchSource
#include "bellows/models/task.h"             // defines: Task, StepOutput
#include "bellows/obs/phase_clock.h"         // defines: PhaseClock
#include "bellows/train/trainer_options.h"   // defines: TrainerOptions

namespace bellows::precision {
class Precision;
}

namespace bellows::train {

class Optimizer;
class Ema;

// Tokens or pixels of a micro-batch, where it has them (throughput beside samples/s): token ids "x" [B, T] (integer;
// the real ones when an "x_mask" marks them, summed on the device) or images "x" [B, C, H, W] (B x H x W pixels).
struct BatchUnits {
  std::string unit;      // "tokens", "pixels", or "" (neither)
  double host = 0;       // counted on the host
  at::Tensor on_device;  // counted on the device (masked tokens)
};
BatchUnits units_of(const data::Batch& batch);

// A step's gradients after its optimizer phase, all on the device (nothing waits for it): the global norm before
// clipping, found_inf (float32, 1: the optimizer skipped the update), and each parameter's gradient norm with the
// index (in the optimizer's parameters) of its parameter, read only when a record finds a skipped step, to name it.
struct GradientReport {
  at::Tensor norm, skipped, param_norms;
  std::vector<std::int32_t> owners;
};

struct StepResult {
  std::vector<StepOutput> outputs;  // each micro-batch's loss (detached) and metrics, in order
  std::vector<BatchUnits> units;    // each micro-batch's tokens or pixels
  std::int64_t samples = 0;         // this rank's samples
  GradientReport gradients;
  bool repeated = false;  // ran again after an out-of-memory error: what was counted during it is no one step's
  bool ema_updated = false;  // the EMA was updated by the step itself (inside a captured graph)
};

// How each loaded batch runs: as `parts` near-equal micro-batches, each part's loss weighted by its share of the
// batch. Chosen by the batch-size finder (Trainer::set_micro_split), doubled by out-of-memory recovery; trainer state.
struct MicroSplit {
  std::int64_t parts = 1;
  std::int64_t recoveries = 0;  // out-of-memory recoveries over the trainer's fit() calls
  std::string note;             // why the last out-of-memory error was not recovered from ("" none)
};

// What every runner works with. The trainer owns all of it and outlives its runners.
struct StepParts {
  torch::nn::Module& model;
  Task& task;
  precision::Precision& precision;
  Optimizer& optimizer;
  dist::Strategy& strategy;
  const TrainerOptions& options;
  const std::vector<at::Tensor>& params;  // the optimizer's parameters, in its order
  obs::PhaseClock& clock;                 // laps: data, copy, forward, backward (the loop laps the rest)
  MicroSplit& split;
  std::function<void(const std::string&)> message;  // a notice to every sink
  Ema* ema = nullptr;  // the EMA a captured step may update inside its graph (the trainer updates it otherwise)
  // A plan row decided while training (key, value, reason): compile: auto's measured choice. May be empty.
  std::function<void(const std::string&, const std::string&, const std::string&)> revise_plan;
};

// The loaded batches of one optimizer step, taken from the training source as a runner asks for them (the wait is
// the step's data phase). A runner that looked at the next batch and leaves it to another hands it back.
class StepBatches {
 public:
  StepBatches(data::BatchSource& source, std::int64_t count, std::int64_t number, obs::PhaseClock& clock)
      : source_(source), count_(count), number_(number), clock_(clock) {}
  std::int64_t count() const { return count_; }    // loaded batches in this step (accumulation_steps, fewer at an epoch's end)
  std::int64_t number() const { return number_; }  // the optimizer step's number, from 1 (for messages)
  data::Batch next();                              // kInternal error when the source ends before count() batches
  // Batches handed back are returned by next() first, in the order they were handed back.
  void put_back(data::Batch batch) { held_.push_back(std::move(batch)); }

 private:
  data::BatchSource& source_;
  std::int64_t count_, number_;
  obs::PhaseClock& clock_;
  std::deque<data::Batch> held_;
};

class StepRunner {
 public:
  virtual ~StepRunner() = default;
  // One optimizer step over batches.count() loaded batches: forward and backward of every micro-batch, then the
  // optimizer phase (unscale, clip, the update skipped on the device on non-finite gradients, zero_grad). The
  // learning rate is set before (Optimizer::set_lr). Nothing waits for the device.
  virtual StepResult run(StepBatches& batches) = 0;
};

// The runner a fit uses: an EagerStep; inside a RecoveringStep when out-of-memory recovery applies (one process, or
// oom_recovery_with_ranks); inside a GraphStep when options.compile asks for CUDA graphs and the run allows them
// (else it says why, once, and steps run eagerly). Notes why recovery is off into parts.split.note. `step`: the
// optimizer steps taken before the fit's first.
std::unique_ptr<StepRunner> make_step_runner(const StepParts& parts, std::int64_t step);

}  // namespace bellows::train
