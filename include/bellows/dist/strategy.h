// How the replicas of a model meet: the Trainer's one seam for everything that depends on the number of
// processes. `SingleDevice` (one process) is always built and is what every single-process run goes
// through; `Ddp` (dist/ddp.h) is data parallel over c10d; `Zero1` and `Zero2` (dist/zero.h) are Ddp with the
// optimizer state, and the gradients too, sharded over the ranks. The training loop never branches on the world size:
// it calls backward() (inside no_sync() for accumulation micro-steps), finish_gradients() before the optimizer,
// all_reduce_sum() for meters, and writes files only where is_main().
#pragma once

#include <ATen/core/Tensor.h>
#include <torch/nn/module.h>

#include <memory>
#include <string>
#include <vector>

#include <functional>

#include "bellows/util/block_hooks.h"  // defines: BlockHooks
#include "bellows/util/state_dict.h"   // defines: StateDict

namespace bellows::dist {

// The model as a strategy sees it (dist/ knows no model type): its named blocks, which the trainer reads from
// models::Checkpointable, and where hooks around them go.
struct ModelBlocks {
  std::string model_name;          // in messages
  std::vector<std::string> names;  // the blocks' module names ("encoder.layers.0"), in the model's order; empty: none
  std::function<std::vector<at::Tensor>(const std::string&)> parameters;  // a block's parameters
  std::function<void(std::shared_ptr<BlockHooks>)> set_hooks;             // around every block the model runs
};

class Strategy {
 public:
  virtual ~Strategy() = default;

  virtual std::string name() const = 0;  // "single" | "ddp" | "zero1" | "zero2" | "fsdp"
  virtual int rank() const { return 0; }
  virtual int world_size() const { return 1; }
  virtual int local_rank() const { return 0; }
  bool is_main() const { return rank() == 0; }
  // One line for the plan table and logs: world size, backend, bucket size.
  virtual std::string describe() const = 0;

  // Before the first step, after the model is on its device and loaded: replicas made equal (rank 0's
  // parameters and buffers), gradient communication attached to `params` (the trainable ones). Again after a
  // resume or any change of the parameter tensors.
  virtual void setup(torch::nn::Module& model, const std::vector<at::Tensor>& params) {}

  // Rank 0's buffers (BatchNorm running statistics, ...) to every rank, as PyTorch's DDP does before each forward
  // (broadcast_buffers): the trainer calls it before each optimizer step's first forward and before evaluation.
  virtual void sync_buffers(torch::nn::Module& model) {}

  // Backward of a (precision-scaled) loss. Inside a NoSync scope gradients only accumulate locally.
  virtual void backward(const at::Tensor& loss) { loss.backward(); }
  // Gradients of every rank combined (the mean); call after the last micro-step's backward, before unscaling,
  // clipping and the optimizer. A no-op for one process.
  virtual void finish_gradients() {}

  // In place, summed over ranks (meters, evaluation sums, counts).
  // `what` names the sum in a failure's message ("all-reduce of <what> failed").
  virtual void all_reduce_sum(std::vector<at::Tensor>& tensors, const std::string& what) {}
  void all_reduce_sum(std::vector<at::Tensor>& tensors) { all_reduce_sum(tensors, "meters"); }
  virtual void broadcast(std::vector<at::Tensor>& tensors, int root = 0) {}
  virtual void barrier() {}
  // Decisions every rank must take at the same step (a stop request, a due checkpoint): each flag of the result is
  // true when it was true on any rank. One process gets its own flags back. Several agree without waiting: each
  // call starts an asynchronous all-reduce of its flags and returns the outcome of the previous call's (all false
  // for the first), so the job acts one step after any rank asked, and the step does not pay a round trip.
  virtual std::vector<bool> agree(std::vector<bool> flags) { return flags; }
  // Means per optimizer step since the last call, for the step records (Ddp: comm_ms, the time from the first
  // bucket's launch to the last one's completion, and comm_wait_ms, the part of it the step waited for after
  // backward). Empty for one process.
  virtual std::vector<std::pair<std::string, double>> metrics() { return {}; }
  // Bytes of gradient buffers the strategy holds now (Ddp's buckets, which the gradients are views of); 0 for none.
  virtual std::int64_t gradient_buffer_bytes() const { return 0; }

  // --- what the strategy shards: everything that differs between ddp, zero1, zero2 and fsdp is asked here, so the
  // trainer, the step runners and the assembly never ask which strategy they hold ---

  // The model, before shard(): a strategy that keeps weights block by block (fsdp) chooses its units among `model`'s
  // blocks and installs its hooks there (kConfig errors name what does not fit: no blocks, a pattern matching none).
  // `params`: the trainable parameters, in the order shard() will get them.
  virtual void attach(const ModelBlocks& model, const std::vector<at::Tensor>& params) {}
  // Which of the trainable parameters (in the trainer's order, the same on every rank) this rank's optimizer updates:
  // every one of them, except where the strategy shards the optimizer (zero1, zero2, fsdp), which gives each
  // parameter one owner rank. kConfig error where a rank would own none.
  virtual std::vector<bool> shard(const std::vector<at::Tensor>& params) { return std::vector<bool>(params.size(), true); }
  // Per trainable parameter (after shard()), the rank that holds its optimizer state and writes it, its weight and
  // its average (EMA) into a sharded checkpoint: the owner where the optimizer is sharded; otherwise whole tensors
  // spread over the ranks as assign_owners() spreads them (dist/zero.h), so that every rank writes about 1/world.
  virtual std::vector<int> owners(const std::vector<at::Tensor>& params) const;
  // Per trainable parameter (after shard()), whether this rank keeps its weight between steps (the EMA averages
  // those): all, except under fsdp, which keeps a unit's weights another rank owns only while the unit runs.
  virtual std::vector<bool> held_between_steps(const std::vector<at::Tensor>& params) const { return std::vector<bool>(params.size(), true); }
  // After the optimizer step: each owner's updated parameters to every rank (zero1, zero2; a no-op otherwise).
  virtual void finish_update() {}
  // The entries `local` of every rank merged on rank 0 (the others get an empty dict): a collective every rank calls,
  // for a whole checkpoint of a sharded optimizer state or EMA. A strategy whose ranks hold everything returns `local`.
  virtual StateDict gather_state(const StateDict& local) { return local; }
  // The per-parameter gradient norms that clipping and the non-finite check read: `norms` of the gradients this rank
  // holds, `held` their indices among `count` trainable parameters. Where every rank holds every gradient, they are
  // returned as they are. Where gradients are sharded (zero2, fsdp: after finish_gradients() a rank holds its own
  // parameters' only), every parameter's norm, combined over the ranks (a collective; x + 0 is x exactly, so every
  // rank computes ddp's total from the same numbers and skips alike), and `held` becomes 0..count-1.
  virtual at::Tensor combine_gradient_norms(const at::Tensor& norms, std::vector<std::int64_t>& held, std::int64_t count) { return norms; }

  // Weights released between uses (fsdp: dist/fsdp.h): from setup() on, the weights another rank owns are held only
  // while their unit runs (parameters_released() is true); gather_parameters() brings every weight back on every rank
  // (a collective every rank enters; nothing where none is released: the end of a fit calls it), release_parameters()
  // lets them go again.
  virtual bool parameters_released() const { return false; }
  virtual void gather_parameters() {}
  virtual void release_parameters() {}
  // Every weight on every rank while the returned object lives (a whole checkpoint, an evaluation, anomaly checks, a
  // restore): weights released as above are gathered, and released again when it ends.
  class WholeParameters {
   public:
    explicit WholeParameters(Strategy& s) : s_(s), gathered_(s.parameters_released()) {
      if (gathered_) s_.gather_parameters();
    }
    ~WholeParameters() {
      if (gathered_) s_.release_parameters();
    }
    WholeParameters(const WholeParameters&) = delete;
    WholeParameters& operator=(const WholeParameters&) = delete;

   private:
    Strategy& s_;
    bool gathered_;
  };
  WholeParameters whole_parameters() { return WholeParameters(*this); }

  // Accumulation micro-steps: `auto guard = strategy.no_sync();` -- no communication until it ends.
  class NoSync {
   public:
    explicit NoSync(Strategy& s) : s_(&s), before_(s.sync_) { s.sync_ = false; }
    NoSync(NoSync&& other) noexcept : s_(other.s_), before_(other.before_) { other.s_ = nullptr; }
    NoSync(const NoSync&) = delete;
    NoSync& operator=(const NoSync&) = delete;
    NoSync& operator=(NoSync&&) = delete;
    ~NoSync() {
      if (s_) s_->sync_ = before_;
    }

   private:
    Strategy* s_;
    bool before_;
  };
  NoSync no_sync() { return NoSync(*this); }
  bool syncing() const { return sync_; }

 private:
  bool sync_ = true;
};

// assign_owners (dist/zero.h) over `params`: whole tensors spread over `world_size` ranks, tied ones together.
std::vector<int> spread_owners(const std::vector<at::Tensor>& params, int world_size);

// One process, one device: nothing to communicate.
class SingleDevice final : public Strategy {
 public:
  std::string name() const override { return "single"; }
  std::string describe() const override { return "one process"; }
};

}  // namespace bellows::dist
