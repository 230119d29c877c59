// Whole training steps as CUDA graphs (`compile: cuda_graph`; train/step_graph.h has the graph itself and which runs
// can be captured): a StepRunner (train/step_runner.h) that runs kStepGraphWarmup steps for real on the graph's side
// stream, captures the next one (forward and backward of each micro-batch of the step, unscale, clip, fused optimizer,
// loss-scale update) into the graph, and replays it for every later step whose batches have the captured shapes, the
// batches copied into the captured inputs. A step of other shapes (or fewer micro-batches, at an epoch's end) runs as
// an eager step (said once); a capture that fails leaves the host as before
// it (gradients, the loss scaler's step, the optimizer's count) and every later step runs eagerly, saying why.
#pragma once

#include <chrono>
#include <memory>
#include <vector>

#include "bellows/train/eager_step.h"
#include "bellows/train/step_graph.h"
#include "bellows/train/step_runner.h"

namespace bellows::train {

// The conditions of step_graph_unfit that options alone decide (micro_split 1, activation checkpointing off, the
// fused optimizer unless optimizer.implementation is foreach); make_step_runner adds what it learns at fit().
StepGraphConditions step_graph_conditions(const TrainerOptions& options, std::int64_t world_size);

class GraphStep final : public StepRunner {
 public:
  // Moves the learning rate onto the device (Optimizer::use_lr_tensor) and says when the capture will come. `step`:
  // the optimizer steps taken before the first run(); `eager` runs the steps the graph cannot.
  // `measure` (compile: auto): after the capture, kStepGraphTrialSteps replays are timed against as many eager steps
  // and the faster way is kept (choose_step_graph), said in a message.
  GraphStep(const StepParts& parts, std::unique_ptr<StepGraph> graph, std::unique_ptr<EagerStep> eager, std::int64_t step,
            bool measure = false);
  StepResult run(StepBatches& batches) override;

 private:
  // compile: auto's trial, after the capture: kReplays timed, then kEager timed, then decided (kDone).
  enum class Trial { kOff, kReplays, kEager, kDone };
  void next_trial_step(double samples);  // counts a step of the trial's window; ends the window after its last
  void body();  // the step a warm-up runs and the capture records: it reads inputs_ and writes outs_ and gradients_
  // Whether a step's batches (on the device) can run as the captured step: as many, each with the captured layout. Says
  // why not, once.
  bool fits(const std::vector<data::Batch>& batches, std::int64_t number);
  // The step's batches into the captured inputs (the first step's become them); false when they do not fit.
  bool take_inputs(const std::vector<data::Batch>& on_device, std::int64_t number);
  // A warm-up, or the capture (once) and a replay; false after a capture that failed (the run goes on eagerly).
  bool run_graph(std::int64_t number, const std::vector<data::Batch>& on_device);
  // The step's batches as an eager step, handed back to `batches` (the host copies).
  StepResult run_eagerly(StepBatches& batches, std::vector<data::Batch>& loaded);
  StepParts p_;
  std::unique_ptr<StepGraph> graph_;  // null after a failed capture: eager steps from then on
  std::unique_ptr<EagerStep> eager_;
  std::int64_t warmed_ = 0;  // warm-up steps run
  bool captured_ = false;
  bool told_layout_ = false;  // the message about a batch of other shapes was given
  std::vector<data::Batch> inputs_;  // the batch tensors the graph reads, one set per micro-batch (each step's are copied in)
  std::vector<StepOutput> outs_;     // each micro-batch's, written by each replay
  GradientReport gradients_;  // written by each replay
  bool ema_in_graph_ = false;  // the EMA's update is captured too (Ema::capture_unfit, and no EMA evaluation swapping it)
  Trial trial_ = Trial::kOff;
  std::int64_t trial_steps_ = 0;  // steps of the current window
  double trial_samples_ = 0;      // samples of the trial's replay window
  double replay_ms_ = 0;          // per step, over the replay window
  std::chrono::steady_clock::time_point window_start_;
};

}  // namespace bellows::train
