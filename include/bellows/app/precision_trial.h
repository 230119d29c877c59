// precision: auto on a CPU with bf16 units, decided per model by measurement. The plan's rule (precision/registry.h)
// picks bf16-mixed where the CPU has native bf16 dot products; whether a given model trains faster in it depends on
// the model: the built-in W1/W3/W4 measured 1.75x faster on an AVX512_BF16 EPYC (docs/benchmarks.md), torchvision's
// ResNet-18 measured fp32 1.22x faster than bf16-mixed on an AMX Xeon (issue 44). A short trial of training steps
// (forward and backward on the run's first batch, the two precisions alternating) decides, and its result is cached
// per machine, LibTorch, model and batch shape, so a run of the same model on the same machine does not measure again.
#pragma once

#include <torch/nn/module.h>

#include <optional>
#include <string>

#include "bellows/data/batch.h"    // defines: Batch
#include "bellows/models/task.h"   // defines: Task
#include "bellows/plan/plan.h"     // defines: Plan

namespace bellows::app {

// The trial's verdict: the fastest milliseconds of a training step's forward and backward in each precision.
struct PrecisionTrial {
  std::string reduced;     // the reduced precision tried (bf16-mixed)
  double fp32_ms = 0;
  double reduced_ms = 0;
  bool cached = false;     // read from the cache, not measured by this run
  std::string cache_file;  // where it is (or would be) kept; "" without a cache directory
};

// The reduced precision is kept only when it measured at least this much faster than fp32: a change of numerics
// is earned by a clear gain, not by the noise of a few steps.
inline constexpr double kReducedPrecisionMinGain = 1.10;

// The plan's choice `reduced` against fp32, for `model` and `task` on `batch` on the CPU: the cached verdict for this
// machine, LibTorch, model (its parameters' names and shapes) and batch, else one measured now (1 warm-up and 3 timed
// steps each, alternating; fewer for slow steps) and cached. The model's buffers, random streams and gradients are
// put back. bellows' errors of the model propagate; the trial runs after app::trial_evaluation.
PrecisionTrial measure_precision_trial(torch::nn::Module& model, Task& task, const data::Batch& batch, const std::string& reduced);

// The precision the trial chooses (fp32 or `trial.reduced`), and the plan's reason for it.
std::pair<std::string, std::string> precision_from_trial(const PrecisionTrial& trial, const std::string& rule_reason);

}  // namespace bellows::app
