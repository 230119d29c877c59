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

#include "bellows/util/block_hooks.h"  // defines: BlockHooks
#include "bellows/util/state_dict.h"   // defines: StateDict

namespace bellows::dist {

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
  virtual void all_reduce_sum(std::vector<at::Tensor>& tensors) {}
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

  // Sharded optimizer state (zero1: dist/zero.h). shard(params): which of the trainable parameters (in the
  // trainer's order, the same on every rank) this rank's optimizer updates; every one of them everywhere, except
  // where the strategy shards the optimizer, which gives each parameter one owner rank. finish_update(): after the
  // optimizer step, each owner's updated parameters to every rank. gather_state(): the optimizer state of every
  // rank merged (rank 0 gets the whole dict; the others an empty one) for a checkpoint: a collective every rank
  // calls. A strategy that does not shard returns `local` itself.
  virtual bool shards_optimizer() const { return false; }
  virtual std::vector<bool> shard(const std::vector<at::Tensor>& params) { return std::vector<bool>(params.size(), true); }
  virtual void finish_update() {}
  virtual StateDict gather_state(const StateDict& local) { return local; }
  // Sharded gradients (zero2): after finish_gradients() a rank holds the gradients of the parameters its optimizer
  // updates only (the others' .grad undefined). Whatever is computed over all gradients (the norm that clips and
  // decides a skipped step) is then combined over the ranks by the caller, with all_reduce_sum().
  virtual bool shards_gradients() const { return false; }

  // Sharded parameters (fsdp: dist/fsdp.h). Where shards_parameters() is true, the trainer matches unit_patterns()
  // (empty: every block) against the model's blocks, hands the strategy each unit's trainable parameters (indices
  // into the list shard() will get) with set_units() before shard(), and installs block_hooks() on the model. From
  // setup() on, the weights another rank owns are held only while their unit runs (parameters_released() is true);
  // gather_parameters() brings every weight back on every rank (a collective: a checkpoint, an evaluation, the end of
  // a fit), release_parameters() lets them go again (local).
  virtual bool shards_parameters() const { return false; }
  virtual std::vector<std::string> unit_patterns() const { return {}; }
  virtual void set_units(std::vector<std::string> names, std::vector<std::vector<std::size_t>> params) {}
  virtual std::shared_ptr<BlockHooks> block_hooks() { return nullptr; }
  virtual bool parameters_released() const { return false; }
  virtual void gather_parameters() {}
  virtual void release_parameters() {}

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

// One process, one device: nothing to communicate.
class SingleDevice final : public Strategy {
 public:
  std::string name() const override { return "single"; }
  std::string describe() const override { return "one process"; }
};

}  // namespace bellows::dist
