// A whole training step as one CUDA graph (`compile: cuda_graph`; seed 000's jit and seed 004's torch.compile
// for C++): after warm-up steps on a side stream, the step (forward and backward of each of its micro-batches,
// unscale, clip, optimizer, loss-scale update) is captured once with at::cuda::CUDAGraph and replayed for every later
// step whose batches have the captured shapes, its inputs copied into the captured ones (one set per micro-batch, as
// Megatron's full-iteration graphs hold a whole accumulated step). Nothing in the step waits for the host: the non-finite check
// and the clip norm stay on the device, the fused optimizers take found_inf, and the learning rate is a device
// tensor the trainer fills before each replay.
//
// Which steps can be captured is decided here, on the CPU, from the run's settings (step_graph_unfit); the trainer
// falls back to eager steps and says why when they cannot, when a batch's shapes differ from the captured ones (that
// step runs eagerly), and when capture fails (an op that cannot be captured, e.g. one that reads a value back).
#pragma once

#include <c10/core/Device.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

namespace bellows::train {

// What decides whether a run's training steps can be one graph each.
struct StepGraphConditions {
  bool cuda = false;                      // the model trains on a CUDA device
  std::int64_t accumulation_steps = 1;    // micro-batches per optimizer step (all of them in the graph)
  std::int64_t micro_split = 1;           // parts each loaded batch runs as (batch-size finder, out-of-memory recovery)
  bool ema = false;                       // EMA of weights (its update follows each replay on the device: no host read)
  std::int64_t world_size = 1;            // data-parallel processes
  bool detect_anomaly = false;
  bool oom_recovery = false;              // out-of-memory recovery retries steps
  bool fused_optimizer = true;            // the optimizer runs ATen's fused kernels
  bool activation_checkpointing = false;  // recomputation saves and restores RNG states on the host
  bool sessions = false;                  // online training (each fit() a session over new data)
};

// "" when every step of such a run can be captured; else the first reason it cannot, in words for the plan table
// and the fallback message ("accumulation over 4 micro-batches: ...").
std::string step_graph_unfit(const StepGraphConditions& conditions);

// Capture and replay of one step. warm_up() runs the step for real (on a side stream on CUDA, as capture needs);
// capture() records it without running it; replay() runs what was recorded.
class StepGraph {
 public:
  virtual ~StepGraph() = default;
  virtual void warm_up(const std::function<void()>& step) = 0;
  virtual void capture(const std::function<void()>& step) = 0;
  virtual void replay() = 0;
  virtual std::string kind() const = 0;  // "cuda graph", "eager twin"
  // Waits for the work queued on the graph's device (compile: auto times steps between two of these); the CPU twin's
  // work is done when its calls return.
  virtual void synchronize() {}
  // The device memory the captured graph holds (its private pool); -1 where it is not counted (the CPU twin).
  virtual std::int64_t held_bytes() const { return -1; }
};

// CUDA builds: at::cuda::CUDAGraph on `device`. Elsewhere a kResource error.
std::unique_ptr<StepGraph> make_cuda_step_graph(c10::Device device);

// The CPU twin the tests run: capture() keeps the step, replay() runs it again. Everything around the graph
// (static inputs, the learning-rate tensor, the counters kept on the host, shape checks, fallbacks) is the same.
std::unique_ptr<StepGraph> make_eager_step_graph();

// Warm-up steps before the capture (PyTorch's examples use 3; the optimizer's and the scaler's state exist after one).
inline constexpr std::int64_t kStepGraphWarmup = 3;

// compile: auto -- after the capture, this many replays are timed against as many eager steps (each window between
// two device synchronisations, data waits included on both sides), and the faster way is kept.
inline constexpr std::int64_t kStepGraphTrialSteps = 5;

// The trial's verdict: keep the graph when its replays took no longer than the eager steps; the message names both
// times per step, the samples per second and the memory the graph holds (`graph_bytes`, -1 when not counted).
struct StepGraphChoice {
  bool keep_graph = false;
  std::string message;
};
StepGraphChoice choose_step_graph(double replay_ms_per_step, double eager_ms_per_step, double samples_per_step, std::int64_t graph_bytes);

}  // namespace bellows::train
