// Probe batches and the trainer-less probe step; see step_probe.h.
#include "step_probe.h"

#include <algorithm>
#include <vector>

#include "bellows/obs/memory.h"
#include "bellows/precision/precision.h"
#include "bellows/train/eager_step.h"  // defines: to_device
#include "bellows/train/step_undo.h"

namespace bellows::app {

data::Batch probe_batch(const data::Dataset& train, std::int64_t samples, bool spread, std::int64_t start) {
  samples = std::min(samples, train.size());
  const std::int64_t stride = spread ? train.size() / samples : 1;
  std::vector<std::int64_t> first(static_cast<std::size_t>(samples));
  for (std::int64_t i = 0; i < samples; ++i)
    first[static_cast<std::size_t>(i)] = spread ? (start + i * stride) % train.size() : i;
  data::FetchContext context;
  data::Batch batch = train.get_batch(first, context);
  train.finish_on_device(batch);
  return batch;
}

std::optional<std::int64_t> measure_step_peak(torch::nn::Module& model, Task& task,
                                              const train::TrainerOptions& options, const data::Batch& batch) {
  const c10::Device device = options.device;
  if (!obs::memory_stats(device).tracked) return std::nullopt;
  model.to(device);  // where the trainer puts it
  const std::unique_ptr<precision::Precision> policy =
      precision::make_precision(options.precision, device, options.scaler);
  train::StepUndo undo(model);  // the buffers (BatchNorm statistics) and RNG states the step changes
  undo.save();
  const bool was_training = model.is_training();
  const auto put_back = [&] {
    for (auto& p : model.parameters()) p.mutable_grad().reset();
    undo.restore();
    model.train(was_training);
    obs::reset_peak(device);
  };
  std::int64_t peak = 0;
  try {
    model.train();
    const data::Batch on_device = train::to_device(batch, options);
    obs::reset_peak(device);
    const std::int64_t base = obs::memory_stats(device).current_bytes;
    at::Tensor loss;
    {
      auto autocast = policy->autocast();
      loss = task.step(model, on_device).loss;
    }
    policy->scale_loss(loss).backward();
    peak = obs::memory_stats(device).peak_bytes - base;
  } catch (...) {
    put_back();
    throw;
  }
  put_back();
  return peak;
}

}  // namespace bellows::app
