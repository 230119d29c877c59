// Which training steps can be one CUDA graph, and the CPU twin of the graph (train/step_graph.h).
#include "bellows/train/step_graph.h"

#include <fmt/format.h>

#include <algorithm>

namespace bellows::train {

std::string step_graph_unfit(const StepGraphConditions& c) {
  if (!c.cuda) return "CUDA graphs need a CUDA device";
  if (c.sessions) return "online training runs sessions over data that arrives while it trains";
  if (c.world_size > 1) return fmt::format("{} processes: the data-parallel all-reduce runs from backward hooks and is not captured", c.world_size);
  if (c.micro_split > 1) return fmt::format("each batch runs as {} micro-batches (batch-size finder): a graph holds one whole step of one batch", c.micro_split);
  if (c.detect_anomaly) return "train.detect_anomaly checks every tensor on the host";
  if (c.oom_recovery) return "train.oom_recovery: true retries a step with smaller micro-batches, which a captured step cannot";
  if (!c.fused_optimizer) return "the foreach optimizer reads the skip flag on the host (optimizer.implementation: fused captures)";
  if (c.activation_checkpointing) return "activation checkpointing saves and restores RNG states on the host";
  return "";
}

StepGraphChoice choose_step_graph(double replay_ms, double eager_ms, double samples, std::int64_t graph_bytes) {
  StepGraphChoice c;
  c.keep_graph = replay_ms <= eager_ms;
  const std::string memory = graph_bytes >= 0 ? fmt::format("; the graph holds {:.1f} MB", graph_bytes / 1e6) : "";
  c.message = fmt::format("compile: auto: {} replays took {:.3f} ms a step ({:.0f} samples/s), {} eager steps {:.3f} ms ({:.0f} samples/s){}: {}",
                          kStepGraphTrialSteps, replay_ms, samples * 1e3 / std::max(replay_ms, 1e-9), kStepGraphTrialSteps, eager_ms,
                          samples * 1e3 / std::max(eager_ms, 1e-9), memory,
                          c.keep_graph ? fmt::format("the CUDA graph is kept ({:.2f}x)", eager_ms / std::max(replay_ms, 1e-9))
                                       : "eager steps from here on, the graph released");
  return c;
}

namespace {

class EagerStepGraph final : public StepGraph {
 public:
  void warm_up(const std::function<void()>& step) override { step(); }
  void capture(const std::function<void()>& step) override { step_ = step; }
  void replay() override { step_(); }
  std::string kind() const override { return "eager twin"; }

 private:
  std::function<void()> step_;
};

}  // namespace

std::unique_ptr<StepGraph> make_eager_step_graph() { return std::make_unique<EagerStepGraph>(); }

}  // namespace bellows::train
