// A whole training step as one CUDA graph (`compile: cuda_graph`; seed 000's jit and seed 004's torch.compile
// for C++): after warm-up steps on a side stream, the step (forward, backward, unscale, clip, optimizer, loss-scale
// update) is captured once with at::cuda::CUDAGraph and replayed for every later step whose batch has the captured
// shapes, its inputs copied into the captured ones. Nothing in the step waits for the host: the non-finite check
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
  std::int64_t accumulation_steps = 1;    // micro-batches per optimizer step
  std::int64_t micro_split = 1;           // parts each loaded batch runs as (batch-size finder, out-of-memory recovery)
  bool ema = false;                       // EMA of weights
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
};

// CUDA builds: at::cuda::CUDAGraph on `device`. Elsewhere a kResource error.
std::unique_ptr<StepGraph> make_cuda_step_graph(c10::Device device);

// The CPU twin the tests run: capture() keeps the step, replay() runs it again. Everything around the graph
// (static inputs, the learning-rate tensor, the counters kept on the host, shape checks, fallbacks) is the same.
std::unique_ptr<StepGraph> make_eager_step_graph();

// Warm-up steps before the capture (PyTorch's examples use 3; the optimizer's and the scaler's state exist after one).
inline constexpr std::int64_t kStepGraphWarmup = 3;

}  // namespace bellows::train
