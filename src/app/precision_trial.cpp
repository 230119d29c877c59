// precision: auto decided by a cached trial on the CPU; see precision_trial.h.
#include "bellows/app/precision_trial.h"

#include <fmt/format.h>
#include <fmt/ranges.h>  // formats the shapes (c10::ArrayRef)
#include <torch/torch.h>

#include <algorithm>
#include <chrono>
#include <fstream>
#include <nlohmann/json.hpp>
#include <vector>

#include "bellows/ckpt/checksum.h"  // defines: sha256_hex
#include "bellows/hw/hardware_info.h"
#include "bellows/precision/precision.h"
#include "bellows/train/step_undo.h"
#include "bellows/util/atomic_file.h"
#include "bellows/util/cache.h"

namespace bellows::app {
namespace {

// What makes two trials the same: the machine (CPU model, threads), LibTorch, the model and the batch.
std::string trial_key(torch::nn::Module& model, const data::Batch& batch, const std::string& reduced) {
  const hw::HardwareInfo& hw = hw::HardwareInfo::get();
  std::string text = fmt::format("{}|{}|{}|{}|{}|", hw.cpu.model_name, at::get_num_threads(), hw.torch.version, reduced, batch.shapes());
  for (const auto& p : model.named_parameters()) text += fmt::format("{}{};", p.key(), p.value().sizes());
  for (const auto& b : model.named_buffers()) text += fmt::format("{}{};", b.key(), b.value().sizes());
  return ckpt::sha256_hex(text).substr(0, 16);
}

// The fastest of the timed steps: what the step costs when nothing else takes the cores (another process's burst
// lengthens a step, nothing shortens one).
double fastest(const std::vector<double>& v) { return *std::min_element(v.begin(), v.end()); }

}  // namespace

PrecisionTrial measure_precision_trial(torch::nn::Module& model, Task& task, const data::Batch& batch, const std::string& reduced) {
  PrecisionTrial trial;
  trial.reduced = reduced;
  const std::filesystem::path dir = user_cache_dir();
  if (!dir.empty()) trial.cache_file = (dir / "precision" / (trial_key(model, batch, reduced) + ".json")).string();
  if (!trial.cache_file.empty() && std::filesystem::exists(trial.cache_file)) {
    try {
      std::ifstream in(trial.cache_file);
      const nlohmann::json j = nlohmann::json::parse(in);
      trial.fp32_ms = j.at("fp32_ms").get<double>();
      trial.reduced_ms = j.at("reduced_ms").get<double>();
      trial.cached = trial.fp32_ms > 0 && trial.reduced_ms > 0;
      if (trial.cached) return trial;
    } catch (const std::exception&) {  // a damaged cache entry: measured again and rewritten
    }
  }

  const at::Device cpu(at::kCPU);
  const std::unique_ptr<precision::Precision> policies[2] = {precision::make_precision("fp32", cpu, {}),
                                                              precision::make_precision(reduced, cpu, {})};
  train::StepUndo undo(model);
  undo.save();
  const bool was_training = model.is_training();
  model.train();
  const auto step_ms = [&](const precision::Precision& policy) {
    const auto start = std::chrono::steady_clock::now();
    {
      at::Tensor loss;
      {
        auto guard = policy.autocast();
        loss = task.step(model, batch).loss;
      }
      loss.backward();
    }
    for (auto& p : model.parameters()) p.mutable_grad().reset();
    return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  };
  std::vector<double> times[2];
  try {
    // Two warm-ups each (oneDNN's kernels for the shapes, the allocator), then timed steps alternating, so that a drift
    // of the machine's speed falls on both alike. Slow steps (over a second) are warmed and timed once each.
    double warm = std::max(step_ms(*policies[0]), step_ms(*policies[1]));
    if (warm <= 1000) warm = std::max(step_ms(*policies[0]), step_ms(*policies[1]));
    const int timed = warm > 1000 ? 1 : 3;
    for (int i = 0; i < timed; ++i) {
      for (int k = 0; k < 2; ++k) times[k].push_back(step_ms(*policies[k]));
    }
  } catch (...) {
    for (auto& p : model.parameters()) p.mutable_grad().reset();
    model.train(was_training);
    undo.restore();
    throw;
  }
  model.train(was_training);
  undo.restore();
  trial.fp32_ms = fastest(times[0]);
  trial.reduced_ms = fastest(times[1]);
  if (!trial.cache_file.empty()) {
    const nlohmann::json j = {{"fp32_ms", trial.fp32_ms}, {"reduced_ms", trial.reduced_ms}, {"reduced", reduced},
                              {"batch", batch.shapes()}, {"cpu", hw::HardwareInfo::get().cpu.model_name}, {"threads", at::get_num_threads()}};
    try {
      std::filesystem::create_directories(std::filesystem::path(trial.cache_file).parent_path());
      write_file_atomically(trial.cache_file, j.dump(2) + "\n");
    } catch (const std::exception&) {  // a read-only cache: the next run measures again
      trial.cache_file.clear();
    }
  }
  return trial;
}

std::pair<std::string, std::string> precision_from_trial(const PrecisionTrial& t, const std::string& rule_reason) {
  const double gain = t.fp32_ms / std::max(t.reduced_ms, 1e-9);
  const std::string measured =
      fmt::format("{} {:.3g} ms, fp32 {:.3g} ms for the fastest forward and backward of the run's first batch ({}{})", t.reduced, t.reduced_ms, t.fp32_ms,
                  t.cached ? "measured by an earlier run on this machine" : "measured now",
                  t.cache_file.empty() ? std::string() : fmt::format("; cached in {}", t.cache_file));
  if (gain >= kReducedPrecisionMinGain) {
    return {t.reduced, fmt::format("auto: {}; measured {:.2f}x faster than fp32 for this model: {}", rule_reason, gain, measured)};
  }
  return {"fp32", fmt::format("auto: {} measured {:.2f}x fp32's speed for this model (below the {:.2f}x that earns a change of "
                              "numerics): {}; keeps fp32", t.reduced, gain, kReducedPrecisionMinGain, measured)};
}

}  // namespace bellows::app
