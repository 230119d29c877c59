// What a rank holds under a strategy, by category, at its peak: each strategy's registry entry (dist/registry.h:
// StrategyEntry::memory) sizes its own from the facts of a run (the model's bytes and blocks, the optimizer, the EMA,
// a measured probe step, the checkpoints), so that dist.strategy: auto (plan/strategy.h) asks the entries and names
// none. app/ measures the facts; the helpers below are the rules the strategies share.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace bellows::config {
class Config;
}

namespace bellows::dist {

// One trainable tensor of a block: which tensor (the same one in two blocks is a tied weight) and its bytes.
struct TensorBytes {
  const void* id = nullptr;  // its TensorImpl
  std::int64_t bytes = 0;
};

// A named block of the model (models::Checkpointable::checkpoint_blocks()) and its trainable tensors.
struct BlockBytes {
  std::string name;
  std::vector<TensorBytes> trainable;
};

// What a strategy's memory is sized from.
struct MemoryFacts {
  int world_size = 2;
  // The run's config, for an entry's own keys (dist.fsdp_units); null: their defaults.
  const config::Config* config = nullptr;
  std::int64_t weight_bytes = 0;           // every parameter (trainable and frozen) and buffer, each storage once
  std::int64_t trainable_bytes = 0;        // the trainable parameters (what has gradients and optimizer state)
  std::int64_t trainable_tensors = 0;      // a strategy that gives each tensor one owner needs one per rank at least
  std::vector<BlockBytes> blocks;          // the model's named blocks, in order (empty: it has none)
  int optimizer_states = 2;                // state tensors per trainable parameter (AdamW 2, SGD with momentum 1)
  bool ema = false;                        // ema.enabled: an average of the weights
  bool ema_eval = false;                   // ema.eval: evaluation needs the whole average on every rank
  std::int64_t bucket_bytes = 25LL << 20;  // dist.bucket_mb
  // A probe step with every weight and gradient on one rank (no communication): its peak above what was held before
  // it; -1: it ran out of memory; -2: memory on the device is not counted.
  std::int64_t step_peak_bytes = 0;
  bool checkpoints = false;                 // checkpoint.enabled
  std::string checkpoint_layout = "whole";  // whole | sharded (registry.h's rank_bytes resolves auto to the entry's)
  bool host_memory = true;  // the rank's memory is the host's (training on the CPU): a checkpoint's host copies count
};

// A rank's bytes by category, at its peak (the end of backward, or a checkpoint where that is higher).
struct RankBytes {
  std::int64_t weights = 0, gradients = 0, optimizer = 0, ema = 0, activations = 0;
  std::int64_t checkpoint = 0;  // what a checkpoint adds to the training peak (0 without checkpoints)
  std::string unfit;            // why the strategy cannot run this job ("" where it can)
  std::int64_t total() const { return weights + gradients + optimizer + ema + activations + checkpoint; }
};

// --- rules the strategies share ---

// The probe step's peak less its gradients (the trainable bytes): its activations; 0 where it measured none.
std::int64_t activation_bytes(const MemoryFacts& facts);
// The whole optimizer state: states x the trainable bytes.
std::int64_t optimizer_state_bytes(const MemoryFacts& facts);
// A rank's share of the gradients where they are reduced to owners (zero2, fsdp): trainable / w, plus the two buckets
// in flight, at most every gradient.
std::int64_t sharded_gradient_bytes(const MemoryFacts& facts);
// "" where every rank can own a trainable tensor; else "N trainable tensors for W ranks: a rank would own none".
std::string too_few_tensors(const MemoryFacts& facts);
// "" unless the probe step, which holds every gradient whole as ddp does, ran out of memory: then why.
std::string probe_out_of_memory(const MemoryFacts& facts);

// What a checkpoint adds to the peak of the busiest rank (rank 0), with checkpoints on. It holds, beside the training
// state between steps: under the whole layout with several ranks, `gathered` (what rank 0 collects of the others'
// shares, the strategy's to say) and, on the host, copies of every weight, the whole optimizer state and the EMA;
// under the sharded layout with several ranks nothing (each rank writes its share from the tensors it holds); one
// process's background write copies what it holds. A checkpoint is taken between optimizer steps: what the training
// peak holds and a step lets go (`freed_after_step`: the activations, backward's gradients, gather buffers) makes room
// for it. Host copies count where the rank's memory is the host's.
std::int64_t checkpoint_bytes(const MemoryFacts& facts, std::int64_t gathered, std::int64_t freed_after_step);

}  // namespace bellows::dist
