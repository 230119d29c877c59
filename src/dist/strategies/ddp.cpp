// dist.strategy: ddp -- data parallel over c10d (dist/ddp.h): every rank holds the whole model, gradients are
// averaged in buckets that overlap backward; `auto`'s choice when a launcher started several processes.
#include <fmt/format.h>

#include "bellows/config/binding.h"
#include "bellows/dist/ddp.h"
#include "bellows/dist/memory.h"
#include "bellows/dist/registry.h"
#include "bellows/util/check.h"
#include "dist/strategies/ddp_keys.h"

namespace bellows::dist {

const config::Binding<DdpOptions>& ddp_binding() {
  return config::bound<DdpOptions>("dist.", [](config::Binding<DdpOptions>& b) {
    b.key("backend", &DdpOptions::backend, "c10d backend: auto (nccl on CUDA, gloo on the CPU), gloo or nccl")
        .choices({"auto", "gloo", "nccl"}).default_value(YAML::Node("auto"));
    b.key("bucket_mb", &DdpOptions::bucket_mb, "gradient all-reduce bucket size, MiB").min(0.001);
    b.key("broadcast_buffers", &DdpOptions::broadcast_buffers, "rank 0's buffers (BatchNorm statistics) to every rank before each step and evaluation");
    b.key("timeout_s", &DdpOptions::timeout_s, "longest wait for the other ranks (rendezvous, every collective) before failing").min(1);
  });
}

DdpOptions configured_ddp_options(const config::Config& config) { return ddp_binding().read(config); }

DdpOptions read_ddp_options(const StrategyRequest& r) {
  const config::Config& c = r.config;
  DdpOptions o = ddp_binding().read(c);
  if (o.backend == "auto") o.backend = r.device.is_cuda() ? "nccl" : "gloo";
  BELLOWS_CHECK_CONFIG(o.backend != "nccl" || r.device.is_cuda(),
                       fmt::format("dist.backend is nccl ({}) but the device is {}", c.origin("dist.backend").str(), r.device.str()),
                       "NCCL reduces CUDA tensors: use dist.backend: gloo (or auto) on the CPU");
  o.config_hash = r.config_hash;
  return o;
}

std::shared_ptr<Ddp> joined_or_join(const StrategyRequest& r) {
  return r.joined ? r.joined : std::make_shared<Ddp>(r.process, read_ddp_options(r));
}

namespace {

// Every rank holds every tensor: the weights, 2 x the trainable bytes of gradients at the end of backward (the buckets
// kept between steps, and the gradients backward allocates before they are copied into them), the whole optimizer
// state, the EMA of the weights. A checkpoint is rank 0's whole (nothing to gather).
RankBytes ddp_memory(const MemoryFacts& f) {
  RankBytes b;
  b.weights = f.weight_bytes;
  b.gradients = 2 * f.trainable_bytes;
  b.optimizer = optimizer_state_bytes(f);
  b.ema = f.ema ? f.weight_bytes : 0;
  b.activations = activation_bytes(f);
  b.checkpoint = checkpoint_bytes(f, /*gathered=*/0, /*freed_after_step=*/b.activations + f.trainable_bytes);
  b.unfit = probe_out_of_memory(f);
  return b;
}

StrategyEntry ddp_strategy() {
  StrategyEntry e;
  e.name = "ddp";
  e.help = "data parallel over c10d: gradients averaged across the job's processes";
  e.several_processes = true;
  e.auto_preference = 1;
  e.memory = ddp_memory;
  e.auto_memory_order = 1;  // the fastest: no more traffic than the gradients' all-reduce
  e.add_keys = [](config::Schema& s) { ddp_binding().declare(s); };
  e.make = [](const StrategyRequest& r) -> std::shared_ptr<Strategy> { return joined_or_join(r); };
  return e;
}

const StrategyRegistrar kDdpStrategyRegistered(ddp_strategy());

}  // namespace
}  // namespace bellows::dist
