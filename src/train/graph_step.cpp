// Whole training steps as CUDA graphs; see graph_step.h.
#include "bellows/train/graph_step.h"

#include <ATen/ATen.h>
#include <fmt/format.h>
#include <fmt/ranges.h>

#include "bellows/dist/strategy.h"
#include "bellows/precision/precision.h"
#include "bellows/train/optimizer.h"
#include "bellows/util/exception_report.h"
#include "bellows/util/format.h"  // defines: shape_of

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
  c.fused_optimizer = o.optimizer.implementation != "foreach";
  c.sessions = o.sessions;
  return c;
}

GraphStep::GraphStep(const StepParts& parts, std::unique_ptr<StepGraph> graph, std::unique_ptr<EagerStep> eager, std::int64_t step)
    : p_(parts), graph_(std::move(graph)), eager_(std::move(eager)) {
  p_.optimizer.use_lr_tensor(p_.options.device);
  p_.message(fmt::format("compile: cuda_graph ({}): {} warm-up steps, then step {} is captured and every later step with the same "
                         "batch shapes replays it", graph_->kind(), kStepGraphWarmup, step + kStepGraphWarmup + 1));
}

void GraphStep::body() {
  StepOutput out;
  {
    auto autocast = p_.precision.autocast();
    out = p_.task.step(p_.model, inputs_);
  }
  p_.strategy.backward(p_.precision.scale_loss(out.loss));
  out.loss = out.loss.detach();
  gradients_ = eager_->optimizer_phase(/*number=*/0);  // detect_anomaly is never on under a graph (step_graph_unfit)
  out_ = std::move(out);
}

StepResult GraphStep::run(StepBatches& batches) {
  if (!graph_) return eager_->run(batches);
  data::Batch loaded = batches.next();
  const data::Batch b = to_device(loaded, p_.options);
  p_.clock.lap(obs::Phase::kCopy);
  const bool first = inputs_.tensors.empty();
  const bool fits = first || same_layout(b, inputs_);
  if (first) {
    inputs_ = b;
    for (auto& [name, t] : inputs_.tensors) t = t.clone(at::MemoryFormat::Preserve);
  } else if (fits) {
    for (auto& [name, t] : inputs_.tensors) t.copy_(b.tensors.at(name), /*non_blocking=*/true);
  } else if (!told_layout_) {
    told_layout_ = true;
    p_.message(fmt::format("compile: cuda_graph: optimizer step {}'s batch ({}) has other shapes than the captured one ({}): such "
                           "steps run eagerly", batches.number(), layout_of(b), layout_of(inputs_)));
  }
  bool ran = false;
  if (fits) {
    const std::int64_t optimizer_steps = p_.optimizer.steps();
    Optimizer::StateMark had_state;  // taken before the capture only: replays create no state
    if (warmed_ < kStepGraphWarmup) {
      graph_->warm_up([this] { body(); });
      ++warmed_;
      ran = true;
    } else {
      try {
        if (!captured_) {
          had_state = p_.optimizer.state_mark();
          graph_->capture([this] { body(); });
          captured_ = true;
        }
        graph_->replay();
        p_.optimizer.set_steps(optimizer_steps + 1);  // a replay runs no host code; the capture counted once
        ran = true;
      } catch (...) {
        if (captured_) throw;  // a replay that fails is the step's own error
        // An op the capture refused (one that reads a value back, or allocates outside the graph's pool): the run goes
        // on eagerly from this step, which did not run.
        p_.message(fmt::format("compile: cuda_graph: capturing optimizer step {} failed ({}): this and every later step run eagerly",
                               batches.number(), report_current_exception().message));
        // What the capture did on the host goes: gradients, the loss scaler's step, the optimizer's count, and the
        // optimizer state it created (its initialising kernels were captured, never run).
        clear_gradients(p_.params);
        p_.optimizer.drop_state_since(had_state);
        p_.precision.abandon_step();
        p_.optimizer.set_steps(optimizer_steps);
        graph_.reset();
      }
    }
  }
  if (!ran) {  // this step's batch runs eagerly (from the host copy, as every eager step's does)
    batches.put_back(std::move(loaded));
    return eager_->run(batches);
  }
  p_.clock.lap(obs::Phase::kForward);  // forward, backward and optimizer in one
  StepResult result;
  result.outputs.push_back(out_);
  result.units.push_back(units_of(b));
  result.samples = b.size;
  // The graph's outputs are rewritten by each replay: the per-parameter norms the record may read later are copied.
  result.gradients = gradients_;
  if (gradients_.param_norms.defined()) result.gradients.param_norms = gradients_.param_norms.clone();
  return result;
}

}  // namespace bellows::train
