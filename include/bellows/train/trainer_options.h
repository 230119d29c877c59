// What a Trainer is told: the device and precision policy, the optimizer, schedule and EMA, the loop's counts
// (epochs, steps, accumulation, logging, evaluation), clipping, what a non-finite step does, checkpoints, the
// profiler, FLOP counting, out-of-memory recovery and whole-step CUDA graphs. `bellows train` fills it from a config
// (app/trainer_setup.h); C++ users fill it by hand (examples/cpp/custom_task).
#pragma once

#include <c10/core/Device.h>

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "bellows/obs/profile.h"             // defines: ProfileOptions
#include "bellows/precision/grad_scaler.h"   // defines: GradScalerOptions
#include "bellows/train/checkpointing.h"     // defines: CheckpointOptions
#include "bellows/train/ema.h"               // defines: EmaOptions
#include "bellows/train/optimizer.h"         // defines: OptimizerOptions
#include "bellows/train/schedule.h"          // defines: ScheduleOptions

namespace bellows::dist {
class Strategy;
}

namespace bellows::train {

class StepGraph;

// A step whose gradients are not finite is skipped on the device (parameters, optimizer state and EMA stay as they
// were) and reported at the next record with the step and the first parameter whose gradient was not finite. Then:
// kStop ends the run there with a kData error; kSkip trains on; kAuto stops unless the precision policy's loss scaler
// skips such steps by design (fp16-mixed).
enum class OnNonfinite { kAuto, kStop, kSkip };
// "auto", "stop", "skip": the config's words, in the enum's order.
const std::vector<std::string>& on_nonfinite_names();

// Whole training steps as CUDA graphs (train/graph_step.h): kOff; kCudaGraph (every step that can be, replayed);
// kAuto (captured, then kStepGraphTrialSteps replays timed against as many eager steps, and the faster kept for the
// rest of the run). A config's `auto` becomes kAuto where the run can be captured, kOff elsewhere (app/trainer_setup.h).
enum class Compile { kOff, kCudaGraph, kAuto };
const std::vector<std::string>& compile_names();  // "off", "cuda_graph", "auto"

struct TrainerOptions {
  c10::Device device = c10::Device(c10::kCPU);
  std::string precision = "fp32";              // a registered precision policy (precision/registry.h), resolved, not auto
  precision::GradScalerOptions scaler;
  OptimizerOptions optimizer;
  ScheduleOptions schedule;                    // total_steps 0: the run's planned optimizer steps
  std::optional<EmaOptions> ema;               // absent: no EMA
  bool eval_with_ema = false;                  // evaluate with EMA weights (needs ema)
  std::vector<std::string> freeze;             // parameter name globs to freeze
  std::int64_t epochs = 1;  // 0: as many as max_steps takes (train.max_steps set, train.epochs not)
  std::int64_t max_steps = 0;                  // > 0: stop after this many optimizer steps
  std::int64_t accumulation_steps = 1;         // micro-batches per optimizer step
  double clip_max_norm = 0;                    // > 0: clip the global L2 norm of gradients
  double clip_value = 0;                       // > 0: clamp each gradient element to [-v, v]
  OnNonfinite on_nonfinite = OnNonfinite::kAuto;
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
  // after it. A debugging mode: each check waits for the device, and anomaly mode slows backward (train/anomaly.h).
  bool detect_anomaly = false;
  // Out-of-memory recovery (train/recovering_step.h): an out-of-memory error in a micro-batch's copy, forward or
  // backward halves the micro-batch (each loaded batch is split into 2, 4, ... parts) and so doubles the
  // micro-batches per optimizer step, and runs the step again from its first sample: the gradients, buffers
  // (BatchNorm statistics) and RNG states are put back as they were before the step, so the effective batch, the
  // sample order and the result are those of a run planned with the smaller micro-batch (fp32, CPU: bitwise).
  // Logged, counted and kept in checkpoints. A micro-batch of one sample that still fails and an error elsewhere in
  // the step (the optimizer) stop the run with the out-of-memory report (kResource). Costs a copy of the buffers
  // and the RNG states per step (to put them back). With several ranks only with oom_recovery_with_ranks: then
  // every rank retries alike, their backward passes do not communicate and the ranks agree after each step's
  // micro-batches (a blocking all-reduce), which cost 20% of the demo's samples/s on 2 CPU ranks.
  bool oom_recovery = true;
  bool oom_recovery_with_ranks = false;
  // Whole training steps as CUDA graphs (train/graph_step.h). With kCudaGraph, fit() checks step_graph_unfit (a run
  // that cannot is trained eagerly, the first message says why), runs kStepGraphWarmup steps eagerly on a side
  // stream, captures the next one and replays it for every later step whose batch has the captured shapes (a batch
  // with other shapes, e.g. a short last batch, runs eagerly). The learning rate then lives on the device
  // (Optimizer::use_lr_tensor). In the step breakdown a replay is one phase, shown as forward.
  Compile compile = Compile::kOff;
  // Stands in for make_cuda_step_graph and counts as a CUDA device for step_graph_unfit: the tests pass
  // make_eager_step_graph to run everything around the graph on the CPU.
  std::function<std::unique_ptr<StepGraph>()> step_graph_factory;
};

}  // namespace bellows::train
