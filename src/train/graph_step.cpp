// Whole training steps as CUDA graphs; see graph_step.h.
#include "bellows/train/graph_step.h"

#include <ATen/ATen.h>
#include <fmt/format.h>
#include <fmt/ranges.h>

#include "bellows/dist/strategy.h"
#include "bellows/precision/precision.h"
#include "bellows/train/ema.h"
#include "bellows/train/optimizer.h"
#include "bellows/train/optimizer_registry.h"  // defines: find_optimizer
#include "bellows/util/exception_report.h"
#include "bellows/util/format.h"  // defines: shape_of

#include <chrono>
#include <optional>
#include <string>
#include <vector>

namespace bellows::train {
namespace {

// The same tensors by name, with the same shapes, dtypes and strides: a batch a graph captured with `b` can read.
bool same_layout(const data::Batch& a, const data::Batch& b) {
  if (a.tensors.size() != b.tensors.size()) return false;
  for (const auto& [name, t] : a.tensors) {
    const auto it = b.tensors.find(name);
    if (it == b.tensors.end() || t.sizes() != it->second.sizes() || t.strides() != it->second.strides() ||
        t.scalar_type() != it->second.scalar_type()) {
      return false;
    }
  }
  return true;
}

std::string layout_of(const data::Batch& b) {
  std::vector<std::string> parts;
  for (const auto& [name, t] : b.tensors) parts.push_back(fmt::format("{} {}", name, shape_of(t)));
  return fmt::format("{}", fmt::join(parts, ", "));
}

}  // namespace

StepGraphConditions step_graph_conditions(const TrainerOptions& o, std::int64_t world_size) {
  StepGraphConditions c;
  c.cuda = o.device.is_cuda() || static_cast<bool>(o.step_graph_factory);
  c.accumulation_steps = o.accumulation_steps;
  c.ema = o.ema.has_value();
  c.world_size = world_size;
  c.detect_anomaly = o.detect_anomaly;
  c.oom_recovery = o.oom_recovery;
  // As the optimizer will choose (Optimizer::fused, checked again at fit): fused kernels unless foreach is asked for or the
  // registered optimizer has none.
  c.fused_optimizer = o.optimizer.implementation != "foreach" && find_optimizer(o.optimizer.type).fused_kernels;
  c.sessions = o.sessions;
  return c;
}

GraphStep::GraphStep(const StepParts& parts, std::unique_ptr<StepGraph> graph, std::unique_ptr<EagerStep> eager, std::int64_t step,
                     bool measure)
    : p_(parts), graph_(std::move(graph)), eager_(std::move(eager)), trial_(measure ? Trial::kReplays : Trial::kOff) {
  p_.optimizer.use_lr_tensor(p_.options.device);
  // EMA evaluation swaps the EMA's tensors for others, which a graph would still write to: then it is updated after
  // each replay (by the trainer, on the device), as where Ema::capture_unfit names a reason.
  ema_in_graph_ = p_.ema != nullptr && p_.ema->capture_unfit().empty() && !p_.options.eval_with_ema;
  if (measure) {
    p_.message(fmt::format("compile: auto ({}): {} warm-up steps, then step {} is captured; {} replays are timed against {} eager steps "
                           "and the faster way trains on", graph_->kind(), kStepGraphWarmup, step + kStepGraphWarmup + 1,
                           kStepGraphTrialSteps, kStepGraphTrialSteps));
  } else {
    p_.message(fmt::format("compile: cuda_graph ({}): {} warm-up steps, then step {} is captured and every later step with the same "
                           "batch shapes replays it", graph_->kind(), kStepGraphWarmup, step + kStepGraphWarmup + 1));
  }
}

void GraphStep::next_trial_step(double samples) {
  if (trial_ == Trial::kReplays) trial_samples_ += samples;
  if (++trial_steps_ < kStepGraphTrialSteps) return;
  graph_->synchronize();
  const auto now = std::chrono::steady_clock::now();
  const double ms = std::chrono::duration<double, std::milli>(now - window_start_).count() / static_cast<double>(trial_steps_);
  window_start_ = now;
  trial_steps_ = 0;
  if (trial_ == Trial::kReplays) {
    replay_ms_ = ms;
    trial_ = Trial::kEager;
    return;
  }
  trial_ = Trial::kDone;
  const StepGraphChoice choice =
      choose_step_graph(replay_ms_, ms, trial_samples_ / static_cast<double>(kStepGraphTrialSteps), graph_->held_bytes());
  p_.message(choice.message);
  if (p_.revise_plan) {  // plan.json's compile row: what was chosen, with the numbers behind it
    const std::string prefix = "compile: auto: ";
    p_.revise_plan("compile", choice.keep_graph ? "cuda_graph" : "off",
                   "auto, measured: " + choice.message.substr(choice.message.rfind(prefix, 0) == 0 ? prefix.size() : 0));
  }
  if (!choice.keep_graph) graph_.reset();  // its pool goes back to the caching allocator
}

void GraphStep::body() {
  // The eager step's arithmetic (eager_step.cpp): each micro-batch's loss over the step's count of them, the
  // gradients accumulated by backward, the all-reduce (one rank) on the last.
  const std::size_t count = inputs_.size();
  outs_.clear();
  for (std::size_t i = 0; i < count; ++i) {
    StepOutput out;
    {
      auto autocast = p_.precision.autocast();
      out = p_.task.step(p_.model, inputs_[i]);
    }
    std::optional<dist::Strategy::NoSync> no_sync;
    if (i + 1 < count) no_sync.emplace(p_.strategy.no_sync());
    p_.strategy.backward(p_.precision.scale_loss(count == 1 ? out.loss : out.loss / static_cast<double>(count)));
    out.loss = out.loss.detach();
    outs_.push_back(std::move(out));
  }
  gradients_ = eager_->optimizer_phase(/*number=*/0);  // detect_anomaly is never on under a graph (step_graph_unfit)
  if (ema_in_graph_) p_.ema->update_on_device(gradients_.skipped);
}

bool GraphStep::fits(const std::vector<data::Batch>& batches, std::int64_t number) {
  if (inputs_.empty()) return true;
  bool same = batches.size() == inputs_.size();
  for (std::size_t i = 0; same && i < batches.size(); ++i) same = same_layout(batches[i], inputs_[i]);
  if (same || told_layout_) return same;
  told_layout_ = true;
  std::vector<std::string> these, captured;
  for (const auto& b : batches) these.push_back(layout_of(b));
  for (const auto& b : inputs_) captured.push_back(layout_of(b));
  if (batches.size() != inputs_.size()) {
    p_.message(fmt::format("compile: cuda_graph: optimizer step {} has {} micro-batch(es), the captured step {}: such steps run eagerly",
                           number, batches.size(), inputs_.size()));
  } else {
    p_.message(fmt::format("compile: cuda_graph: optimizer step {}'s batch ({}) has other shapes than the captured one ({}): such "
                           "steps run eagerly", number, fmt::join(these, "; "), fmt::join(captured, "; ")));
  }
  return false;
}

StepResult GraphStep::run(StepBatches& batches) {
  if (!graph_) return eager_->run(batches);
  if (trial_ == Trial::kEager) {  // compile: auto's eager window, after the replays'
    StepResult result = eager_->run(batches);
    next_trial_step(static_cast<double>(result.samples));
    return result;
  }
  std::vector<data::Batch> loaded, on_device;
  for (std::int64_t i = 0; i < batches.count(); ++i) {
    loaded.push_back(batches.next());
    on_device.push_back(to_device(loaded.back(), p_.options));
    p_.clock.lap(obs::Phase::kCopy);
  }
  if (!take_inputs(on_device, batches.number()) || !run_graph(batches.number(), on_device)) return run_eagerly(batches, loaded);
  p_.clock.lap(obs::Phase::kForward);  // forward, backward and optimizer in one
  StepResult result;
  result.ema_updated = ema_in_graph_;
  result.outputs = outs_;
  for (const auto& b : on_device) {
    result.units.push_back(units_of(b));
    result.samples += b.size;
  }
  // The graph's outputs are rewritten by each replay: the per-parameter norms the record may read later are copied.
  result.gradients = gradients_;
  if (gradients_.param_norms.defined()) result.gradients.param_norms = gradients_.param_norms.clone();
  return result;
}

bool GraphStep::take_inputs(const std::vector<data::Batch>& on_device, std::int64_t number) {
  const bool first = inputs_.empty();
  if (!fits(on_device, number)) return false;
  if (first) {
    inputs_ = on_device;
    for (auto& b : inputs_) {
      for (auto& [name, t] : b.tensors) t = t.clone(at::MemoryFormat::Preserve);
    }
    return true;
  }
  for (std::size_t i = 0; i < inputs_.size(); ++i) {
    for (auto& [name, t] : inputs_[i].tensors) t.copy_(on_device[i].tensors.at(name), /*non_blocking=*/true);
  }
  return true;
}

bool GraphStep::run_graph(std::int64_t number, const std::vector<data::Batch>& on_device) {
  const std::int64_t optimizer_steps = p_.optimizer.steps();
  if (warmed_ < kStepGraphWarmup) {
    if (ema_in_graph_) p_.ema->prepare_step(number);
    graph_->warm_up([this] { body(); });
    ++warmed_;
    return true;
  }
  Optimizer::StateMark had_state;  // taken before the capture only: replays create no state
  try {
    bool capturing = false;
    if (!captured_) {
      had_state = p_.optimizer.state_mark();
      graph_->capture([this] { body(); });
      captured_ = capturing = true;
    }
    if (ema_in_graph_) p_.ema->prepare_step(number);  // what the replay reads: filled after a capture that held
    graph_->replay();
    p_.optimizer.set_steps(optimizer_steps + 1);  // a replay runs no host code; the capture counted once
    if (trial_ == Trial::kReplays && capturing) {  // the trial's windows start after the captured step's replay
      graph_->synchronize();
      window_start_ = std::chrono::steady_clock::now();
    } else if (trial_ == Trial::kReplays) {
      double samples = 0;
      for (const auto& b : on_device) samples += static_cast<double>(b.size);
      next_trial_step(samples);
    }
    return true;
  } catch (...) {
    if (captured_) throw;  // a replay that fails is the step's own error
    // An op the capture refused (one that reads a value back, or allocates outside the graph's pool): the run goes
    // on eagerly from this step, which did not run.
    p_.message(fmt::format("compile: cuda_graph: capturing optimizer step {} failed ({}): this and every later step run eagerly",
                           number, report_current_exception().message));
    // What the capture did on the host goes: gradients, the loss scaler's step, the optimizer's count, and the
    // optimizer state it created (its initialising kernels were captured, never run).
    clear_gradients(p_.params);
    p_.optimizer.drop_state_since(had_state);
    p_.precision.abandon_step();
    p_.optimizer.set_steps(optimizer_steps);
    graph_.reset();
    return false;
  }
}

StepResult GraphStep::run_eagerly(StepBatches& batches, std::vector<data::Batch>& loaded) {
  for (auto& b : loaded) batches.put_back(std::move(b));  // from the host copies, as every eager step's
  StepResult result = eager_->run(batches);
  if (trial_ == Trial::kReplays && captured_ && graph_) {  // not a replay: the replays' window starts again after it
    graph_->synchronize();
    window_start_ = std::chrono::steady_clock::now();
    trial_steps_ = 0;
    trial_samples_ = 0;
  }
  return result;
}

}  // namespace bellows::train
