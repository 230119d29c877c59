// dist.strategy: zero1 and zero2 -- data parallel with the optimizer state (zero1), and the gradients too (zero2),
// sharded over the ranks: stages 1 and 2 of ZeRO (Rajbhandari et al., "ZeRO: Memory Optimizations Toward Training
// Trillion Parameter Models", SC 2020), on c10d.
//
// Each trainable parameter has one owner rank, and only the owner's optimizer keeps its state (Adam's moments, SGD's
// momentum) and updates it; finish_update() broadcasts each owner's updated parameters to the others, one flat
// buffer per owner, dtype and device. Owners are whole tensors, assigned in the trainer's order, each to the rank
// with the fewest elements so far (lowest rank on a tie), as PyTorch's ZeroRedundancyOptimizer partitions: shards
// of about 1/world of the elements.
//
// zero1: gradients are averaged exactly as Ddp averages them (dist/ddp.h: buckets whose all-reduce overlaps
// backward), so every rank clips, unscales and decides a skipped step alike.
// zero2: each gradient bucket holds one owner's parameters and is reduced to that owner (Ddp::reduce_to_owners),
// overlapping backward as ddp's all-reduce does; the other ranks drop those gradients once they are in the bucket,
// and the bucket once the reduce is done. After finish_gradients() a rank holds its own parameters' averaged
// gradients only. The gradient norm (clipping, the non-finite check that skips a step) is then global through
// combine_gradient_norms(): the per-parameter norms all-reduced, each rank contributing its own and zeros elsewhere,
// so every rank computes ddp's norm from the same numbers and skips alike.
//
// Either way the update is the same elementwise arithmetic on the same gradients as under ddp, so the weights stay
// bitwise those of a ddp run. Per rank: weights as ddp; optimizer state about 1/world of ddp's; gradients as ddp
// (zero1) or, between steps, about 1/world (zero2; during backward each rank still produces every gradient, and
// holds a bucket until it is sent). Per step each rank sends and receives the gradient all-reduce (2x the
// parameters' bytes, as ddp) or the reduces (zero2: about 1x), plus the broadcasts of the other ranks' shards
// (about (world-1)/world x the parameters' bytes). A sharded checkpoint (checkpoint.layout auto) has each owner write
// its parameters' optimizer state, weights and EMA (owners()); a whole one gathers every rank's optimizer state on
// rank 0 (gather_state). Either resumes under any strategy and world size.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "bellows/dist/ddp.h"       // defines: Ddp, DdpOptions
#include "bellows/dist/strategy.h"  // defines: Strategy

namespace bellows::dist {

class Zero : public Strategy {
 public:
  // Joins the job as Ddp does (the same errors). stage 1 or 2 (3: the base of Fsdp, dist/fsdp.h).
  Zero(const ProcessInfo& info, DdpOptions options, int stage);
  // On a job whose processes met already (dist.strategy: auto decides once the model is built): its process group.
  Zero(std::shared_ptr<Ddp> joined, int stage);
  ~Zero() override;
  Zero(const Zero&) = delete;
  Zero& operator=(const Zero&) = delete;

  std::string name() const override { return stage_ == 1 ? "zero1" : stage_ == 2 ? "zero2" : "fsdp"; }
  int rank() const override { return ddp_->rank(); }
  int world_size() const override { return ddp_->world_size(); }
  int local_rank() const override { return ddp_->local_rank(); }
  std::string describe() const override;

  void setup(torch::nn::Module& model, const std::vector<at::Tensor>& params) override;
  void sync_buffers(torch::nn::Module& model) override { ddp_->sync_buffers(model); }
  void backward(const at::Tensor& loss) override;
  void finish_gradients() override { ddp_->finish_gradients(); }
  using Strategy::all_reduce_sum;
  void all_reduce_sum(std::vector<at::Tensor>& tensors, const std::string& what) override { ddp_->all_reduce_sum(tensors, what); }
  void broadcast(std::vector<at::Tensor>& tensors, int root = 0) override { ddp_->broadcast(tensors, root); }
  void barrier() override { ddp_->barrier(); }
  std::vector<bool> agree(std::vector<bool> flags) override { return ddp_->agree(std::move(flags)); }
  std::vector<std::pair<std::string, double>> metrics() override { return ddp_->metrics(); }
  std::int64_t gradient_buffer_bytes() const override { return ddp_->gradient_buffer_bytes(); }

  // kConfig error when there are fewer trainable tensors than ranks (a rank would own nothing).
  std::vector<bool> shard(const std::vector<at::Tensor>& params) override;
  std::vector<int> owners(const std::vector<at::Tensor>& params) const override;
  void finish_update() override;
  StateDict gather_state(const StateDict& local) override;
  // Stage 2 and 3: every parameter's norm, the ranks' own summed over the ranks.
  at::Tensor combine_gradient_norms(const at::Tensor& norms, std::vector<std::int64_t>& held, std::int64_t count) override;

  // The parameter elements each rank owns (after shard()).
  std::vector<std::int64_t> shard_elements() const;

 protected:
  struct Flat {  // one broadcast: an owner's parameters of one dtype and device
    int owner = 0;
    std::vector<at::Tensor> params;
    std::int64_t numel = 0;
  };
  // One flat buffer per (owner, dtype, device) of the parameters in `indices` (of shard()'s list), in that order.
  std::vector<Flat> flats_of(const std::vector<at::Tensor>& params, const std::vector<std::size_t>& indices) const;

  int stage_;
  std::shared_ptr<Ddp> ddp_;
  std::vector<Flat> flats_;         // from shard(): what finish_update() broadcasts
  std::vector<int> owners_;         // from shard(): per parameter, for stage 2's reduce to the owner
  std::vector<int> same_as_;        // from shard(): per parameter, the first index of the same tensor (tied), or -1
  std::vector<std::int64_t> numels_;
  // Stage 3 (Fsdp), set before shard(): per parameter, true where it is gathered from its owner when used, so that
  // finish_update() does not broadcast it.
  std::vector<bool> on_demand_;
};

// dist.strategy: zero1 and zero2, built from what Ddp takes (the strategy registry's and the tests' constructor).
class Zero1 final : public Zero {
 public:
  Zero1(const ProcessInfo& info, DdpOptions options) : Zero(info, std::move(options), 1) {}
  explicit Zero1(std::shared_ptr<Ddp> joined) : Zero(std::move(joined), 1) {}
};
class Zero2 final : public Zero {
 public:
  Zero2(const ProcessInfo& info, DdpOptions options) : Zero(info, std::move(options), 2) {}
  explicit Zero2(std::shared_ptr<Ddp> joined) : Zero(std::move(joined), 2) {}
};

// The owners ZeRO-1 gives `numels` (whole tensors, in order, each to the rank with the fewest elements so far,
// the lowest on a tie). `same_as[i]` >= 0: tensor i is tensor same_as[i] (tied weights) and gets its owner.
std::vector<int> assign_owners(const std::vector<std::int64_t>& numels, const std::vector<int>& same_as, int world_size);

}  // namespace bellows::dist
