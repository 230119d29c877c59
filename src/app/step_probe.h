// What the assembly measures a model's memory on before and after the trainer exists: a batch of the training data
// for a probe step, and a probe step that needs no trainer (the strategy is chosen from it, before the trainer that
// trains is built). Private to app/.
#pragma once

#include <torch/nn/module.h>

#include <cstdint>
#include <optional>

#include "bellows/data/batch.h"             // defines: Batch
#include "bellows/data/dataset.h"           // defines: Dataset
#include "bellows/models/task.h"            // defines: Task
#include "bellows/train/trainer_options.h"  // defines: TrainerOptions

namespace bellows::app {

// `samples` samples of the training data as one batch for a probe step: the first ones, or with `spread` the ones at
// equal strides over the whole data from `start` on (as a shuffled batch mixes them: samples of varying size are
// padded to the largest).
data::Batch probe_batch(const data::Dataset& train, std::int64_t samples, bool spread = false, std::int64_t start = 0);

// The peak tensor memory of one training step on `batch` (forward under the options' precision, backward, no
// optimizer step, no communication: every weight and gradient whole) above what was held before it, on the options'
// device, where the model is moved; gradients, buffers and RNG states are put back, also when it fails (an
// out-of-memory error is rethrown). What Trainer::measure_step_memory measures, without a trainer. std::nullopt where
// the device's memory is not counted (obs/memory.h).
std::optional<std::int64_t> measure_step_peak(torch::nn::Module& model, Task& task,
                                              const train::TrainerOptions& options, const data::Batch& batch);

}  // namespace bellows::app
