// Whole training steps as CUDA graphs (`compile: cuda_graph`; train/step_graph.h has the graph itself and which runs
// can be captured): a StepRunner (train/step_runner.h) that runs kStepGraphWarmup steps for real on the graph's side
// stream, captures the next one (forward, backward, unscale, clip, fused optimizer, loss-scale update) into the
// graph, and replays it for every later step whose batch has the captured shapes, the batch copied into the captured
// inputs. A batch of other shapes runs as an eager step (said once); a capture that fails leaves the host as before
// it (gradients, the loss scaler's step, the optimizer's count) and every later step runs eagerly, saying why.
#pragma once

#include <memory>

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
  GraphStep(const StepParts& parts, std::unique_ptr<StepGraph> graph, std::unique_ptr<EagerStep> eager, std::int64_t step);
  StepResult run(StepBatches& batches) override;

 private:
  void body();  // the step a warm-up runs and the capture records: it reads inputs_ and writes out_ and gradients_
  StepParts p_;
  std::unique_ptr<StepGraph> graph_;  // null after a failed capture: eager steps from then on
  std::unique_ptr<EagerStep> eager_;
  std::int64_t warmed_ = 0;  // warm-up steps run
  bool captured_ = false;
  bool told_layout_ = false;  // the message about a batch of other shapes was given
  data::Batch inputs_;        // the batch tensors the graph reads (each step's batch is copied into them)
  StepOutput out_;            // written by each replay
  GradientReport gradients_;  // written by each replay
};

}  // namespace bellows::train
