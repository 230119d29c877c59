// Data-parallel training over c10d, PyTorch's own distributed engine: one process per device, ranks meet
// through a TCPStore at the master address, gradients are averaged with all-reduce on a ProcessGroupGloo
// (CPU tensors) or ProcessGroupNCCL (CUDA tensors).
//
// Gradient communication is bellows' own bucketing, not c10d's Reducer (whose constructor and per-iteration
// protocol are Python DDP's internals). Trainable parameters are grouped, last registered first (roughly the
// order backward produces their gradients), into buckets of at most `bucket_mb` per dtype and device. A hook
// on each parameter's gradient accumulator marks it ready; when every gradient of a bucket is ready, its
// gradients are copied into the bucket's flat buffer and an asynchronous all-reduce is launched, so
// communication overlaps the rest of backward. Buckets are launched strictly in index order on every rank (a
// bucket whose gradients are ready early waits for the buckets before it), which keeps the collectives of all
// ranks in the same order even when ranks leave different parameters unused. finish_gradients() launches
// what is left (a parameter with no gradient contributes zeros), waits, divides by the world size and makes
// each parameter's .grad a view of its bucket.
//
// Inside Strategy::no_sync() the hooks do nothing: gradients accumulate locally, and the last micro-step's
// backward communicates the sum. Every wait is bounded by `timeout_s`: a rank that died or hangs makes the
// others fail with an error naming the operation and the rank, instead of hanging.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "bellows/config/config.h"       // defines: Config
#include "bellows/dist/environment.h"  // defines: ProcessInfo
#include "bellows/dist/strategy.h"     // defines: Strategy

namespace bellows::dist {

struct DdpOptions {
  std::string backend = "gloo";  // gloo (CPU tensors) | nccl (CUDA tensors)
  double bucket_mb = 25;         // gradient bucket capacity, MiB
  double timeout_s = 300;        // rendezvous and every collective
  std::string config_hash;       // compared at the rendezvous when not empty: ranks with different configs stop
  bool broadcast_buffers = true; // sync_buffers() sends rank 0's buffers to all (one broadcast per dtype)
  bool parameter_group = false;  // fsdp: a second process group for broadcast_parameters()
};

// The dist.* keys of DdpOptions in a validated config, as written (backend auto not yet resolved); bound once in
// src/dist/strategies/ddp.cpp.
DdpOptions configured_ddp_options(const config::Config& config);

class Ddp final : public Strategy {
 public:
  // Joins the job described by `info` (dist/environment.h): rank 0 listens at master_addr:master_port. kResource
  // errors name the address, the port and the ranks that did not arrive; kConfig names a config that differs
  // between ranks.
  Ddp(const ProcessInfo& info, DdpOptions options);
  ~Ddp() override;
  Ddp(const Ddp&) = delete;
  Ddp& operator=(const Ddp&) = delete;

  std::string name() const override { return "ddp"; }
  int rank() const override;
  int world_size() const override;
  int local_rank() const override;
  std::string describe() const override;

  void setup(torch::nn::Module& model, const std::vector<at::Tensor>& params) override;
  void sync_buffers(torch::nn::Module& model) override;
  void finish_gradients() override;
  using Strategy::all_reduce_sum;
  void all_reduce_sum(std::vector<at::Tensor>& tensors, const std::string& what) override;
  void broadcast(std::vector<at::Tensor>& tensors, int root = 0) override;
  void barrier() override;
  std::vector<bool> agree(std::vector<bool> flags) override;
  std::vector<std::pair<std::string, double>> metrics() override;
  std::int64_t gradient_buffer_bytes() const override;

  // ZeRO-2 (dist/zero.h): owners[i] is the rank that keeps the gradient of setup()'s params[i]. Buckets then hold
  // one owner's parameters each (an open bucket per owner, dtype and device, filled last parameter first) and are
  // reduced to that owner instead of all-reduced; on the other ranks the parameters' gradients are dropped once
  // copied into the bucket, and the bucket's buffer once the reduce is done, so after finish_gradients() a rank
  // holds the averaged gradients of its own parameters only (the others' .grad undefined). Call before setup();
  // empty: every gradient to every rank (ddp).
  void reduce_to_owners(std::vector<int> owners);

  // fsdp (dist/fsdp.h): a broadcast on a second process group (DdpOptions::parameter_group), so that the parameter
  // gathers launched from forward and backward never interleave with the gradient buckets' collectives on the first.
  // It is not waited for: the result's wait() does (with the timeout; a failure is a kResource error naming `what`).
  class Pending {
   public:
    virtual ~Pending() = default;
    virtual void wait() = 0;
  };
  std::unique_ptr<Pending> broadcast_parameters(at::Tensor flat, int root, std::string what);
  // Opens that second group where DdpOptions::parameter_group did not (a collective every rank calls); a no-op where
  // it is open.
  void open_parameter_group();

  // Counters of the last finish_gradients(): buckets, and how many were launched from backward's hooks (the
  // rest were launched by finish_gradients itself, after backward).
  struct Stats {
    std::size_t buckets = 0;
    std::size_t launched_in_backward = 0;
  };
  Stats last_stats() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace bellows::dist
