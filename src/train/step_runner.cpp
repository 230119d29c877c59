// The step runners' shared pieces and the choice among them; see step_runner.h.
#include "bellows/train/step_runner.h"

#include <ATen/ATen.h>
#include <ATen/record_function.h>
#include <fmt/format.h>

#include "bellows/dist/strategy.h"
#include "bellows/models/activation_checkpoint.h"  // defines: Checkpointable
#include "bellows/train/eager_step.h"
#include "bellows/train/graph_step.h"
#include "bellows/train/optimizer.h"
#include "bellows/train/recovering_step.h"
#include "bellows/util/check.h"

namespace bellows::train {

BatchUnits units_of(const data::Batch& b) {
  BatchUnits u;
  const auto it = b.tensors.find("x");
  if (it == b.tensors.end() || !it->second.defined()) return u;
  const at::Tensor& x = it->second;
  if (!at::isFloatingType(x.scalar_type()) && x.dim() == 2) {
    u.unit = "tokens";
    if (const auto mask = b.tensors.find("x_mask"); mask != b.tensors.end() && mask->second.sizes() == x.sizes()) {
      u.on_device = mask->second.ne(0).sum().to(at::kFloat);
    } else {
      u.host = static_cast<double>(x.numel());
    }
  } else if (at::isFloatingType(x.scalar_type()) && x.dim() == 4) {
    u.unit = "pixels";
    u.host = static_cast<double>(x.size(0) * x.size(2) * x.size(3));
  }
  return u;
}

data::Batch StepBatches::next() {
  if (!held_.empty()) {
    data::Batch b = std::move(held_.front());
    held_.pop_front();
    return b;
  }
  std::optional<data::Batch> batch;
  {
    RECORD_USER_SCOPE("bellows::data");
    batch = source_.next();
  }
  clock_.lap(obs::Phase::kData);
  BELLOWS_CHECK(batch.has_value(), "the data source ended before its announced batch count", "report this bug");
  return std::move(*batch);
}

std::unique_ptr<StepRunner> make_step_runner(const StepParts& parts, std::int64_t step) {
  const TrainerOptions& o = parts.options;
  const std::int64_t world = parts.strategy.world_size();
  auto eager = std::make_unique<EagerStep>(parts);
  parts.split.note.clear();
  const bool recover = o.oom_recovery && (world == 1 || o.oom_recovery_with_ranks);
  if (o.oom_recovery && !recover) {
    parts.split.note = "out-of-memory recovery is off with several processes (train.oom_recovery: true turns it on; every step then waits for the "
                       "ranks to agree)";
  }
  if (o.compile == Compile::kCudaGraph || o.compile == Compile::kAuto) {
    // What only the trainer knows besides its options: the batch-size finder's split, the optimizer's kernels, the
    // checkpointed blocks.
    StepGraphConditions c = step_graph_conditions(o, world);
    c.micro_split = parts.split.parts;
    c.fused_optimizer = parts.optimizer.fused();
    const auto* blocks = dynamic_cast<const models::Checkpointable*>(&parts.model);
    c.activation_checkpointing = blocks != nullptr && !blocks->checkpointed().empty();
    if (const std::string why = step_graph_unfit(c); why.empty()) {  // then neither recovery nor accumulation apply
      std::unique_ptr<StepGraph> graph = o.step_graph_factory ? o.step_graph_factory() : make_cuda_step_graph(o.device);
      return std::make_unique<GraphStep>(parts, std::move(graph), std::move(eager), step, /*measure=*/o.compile == Compile::kAuto);
    } else {
      parts.message(fmt::format("compile: {}: every step runs eagerly: {}", o.compile == Compile::kAuto ? "auto" : "cuda_graph", why));
    }
  }
  // Out-of-memory recovery (TrainerOptions::oom_recovery); with several ranks only when asked for, since every step
  // then waits for the ranks to agree.
  if (recover) return std::make_unique<RecoveringStep>(parts, std::move(eager), /*together=*/world > 1);
  return eager;
}

}  // namespace bellows::train
