// dist.strategy: fsdp -- parameters sharded too (stage 3 of ZeRO, what PyTorch's FSDP does), on c10d: zero2 (each
// trainable tensor has one owner rank that keeps its optimizer state and its averaged gradient) where, in addition,
// a rank keeps the weights of the tensors it does not own only while the block they belong to runs.
//
// Units are the model's named blocks (models/activation_checkpoint.h: "encoder.layers.0", ...), selected by
// `dist.fsdp_units` globs (empty: every block). Before a unit's forward and again before its backward, each owner
// broadcasts its tensors of the unit (one flat buffer per owner and dtype) on a second process group, so these gathers
// never interleave with the gradient reduces; the next unit's gather is launched before the current one is waited for
// (forward: the unit after it; backward: the one before), which overlaps it with the current unit's compute. After a
// unit's forward, and once autograd has accumulated every gradient of the unit's tensors in backward, the tensors it
// does not own are released: their storage freed in place (the tensors keep their shape; the views autograd saved
// share the storage and see the weights again after the next gather). Gradients are reduced to their owner as under
// zero2; clipping, skipping and the loss scaler read the global per-parameter norms (dist/zero.h).
//
// Ownership is whole tensors (assign_owners in the trainer's order), not a flat parameter split evenly: the shards are
// about 1/world of the elements, as far as whole tensors allow, and every optimizer, the checkpoint files, clipping
// and the loss scaler work as under zero1/zero2. Parameters outside every unit (embeddings, heads, norms between
// blocks) and frozen ones stay on every rank, as under zero2. So a rank holds, between uses, its own tensors, the
// tensors outside units and the frozen ones; while a unit runs, that unit's whole tensors too (two units while the
// next one's gather is in flight).
//
// gather_parameters() brings every tensor back on every rank (a checkpoint, an evaluation, the end of a fit: these see
// the whole model, once per rank); release_parameters() lets the others' go again.
#pragma once

#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "bellows/dist/zero.h"  // defines: Zero

namespace bellows::dist {

class GradientHooks;  // src/dist/gradient_hooks.h

class Fsdp final : public Zero {
 public:
  // Joins the job as Ddp does (with a second process group for the gathers). `units`: dist.fsdp_units.
  Fsdp(const ProcessInfo& info, DdpOptions options, std::vector<std::string> units = {});
  // On a job whose processes met already (dist.strategy: auto): opens the second group there, a collective.
  Fsdp(std::shared_ptr<Ddp> joined, std::vector<std::string> units);
  ~Fsdp() override;

  std::string describe() const override;
  // The units: the model's blocks dist.fsdp_units selects (every block where it is empty), each with its trainable
  // parameters, and the hooks installed on the model. kConfig errors: a model without blocks, a pattern that matches
  // none.
  void attach(const ModelBlocks& model, const std::vector<at::Tensor>& params) override;
  // The units by hand (attach's result): per unit its name and its parameters (indices into shard()'s list).
  void set_units(std::vector<std::string> names, std::vector<std::vector<std::size_t>> params);
  std::shared_ptr<BlockHooks> block_hooks();
  std::vector<bool> shard(const std::vector<at::Tensor>& params) override;
  // This rank's own tensors and those outside every unit.
  std::vector<bool> held_between_steps(const std::vector<at::Tensor>& params) const override;
  void setup(torch::nn::Module& model, const std::vector<at::Tensor>& params) override;
  void finish_gradients() override;
  // Zero's (comm_ms, comm_wait_ms) and gather_wait_ms: per optimizer step, the host's wait for the units' gathers in
  // forward and backward (what the prefetch did not hide; over NCCL the wait is stream-ordered and the host does not
  // block, so it is not measured there).
  std::vector<std::pair<std::string, double>> metrics() override;
  bool parameters_released() const override { return armed_; }
  void gather_parameters() override;
  void release_parameters() override;

 private:
  class Hooks;
  struct Unit {
    std::string name;
    std::vector<std::size_t> params;  // indices into shard()'s list
    std::vector<std::size_t> remote;  // of those, the ones another rank owns (released between uses)
    std::vector<Flat> flats;          // one broadcast per owner and dtype
    std::size_t grads_ready = 0;      // of params' gradients, accumulated in the running backward
    // A gather in flight: its buffers (received, or this rank's own tensors sent) and the collectives.
    std::vector<at::Tensor> buffers;
    std::vector<std::unique_ptr<Ddp::Pending>> pending;
  };

  Unit* find(const std::string& name);
  void launch(Unit& u);    // starts the unit's gather (once; a second call while one is in flight does nothing)
  void complete(Unit& u);  // waits for it and puts the weights into the released tensors
  void release(Unit& u);
  void on_gradient(std::size_t unit);
  void before_forward(const std::string& name);
  void after_forward(const std::string& name);
  void before_backward(const std::string& name);

  std::vector<std::string> patterns_;
  std::vector<at::Tensor> params_;
  std::vector<Unit> units_;
  std::unordered_map<std::string, std::size_t> unit_index_;
  std::vector<std::size_t> unit_of_;  // per parameter: its unit, or npos
  bool armed_ = false;  // between setup()/release_parameters() and gather_parameters(): the hooks move weights
  double gather_wait_s_ = 0;     // in the hooks' complete() since the last metrics()
  std::int64_t steps_since_ = 0; // finish_gradients() calls since the last metrics()
  std::shared_ptr<Hooks> hooks_;
  std::unique_ptr<GradientHooks> grad_hooks_;  // on the units' parameters: on_gradient()
};

}  // namespace bellows::dist
