// The dist.* keys that Ddp and the strategies built on it (zero1) share: declared once, by the ddp entry.
#pragma once

#include "bellows/config/binding.h"
#include "bellows/dist/ddp.h"       // defines: DdpOptions
#include "bellows/dist/registry.h"  // defines: StrategyRequest

namespace bellows::dist {

const config::Binding<DdpOptions>& ddp_binding();
// The request's DdpOptions: backend auto resolved by the device, nccl on a CPU device a kConfig error.
DdpOptions read_ddp_options(const StrategyRequest& r);
// The request's joined process group, or a new one (the rendezvous) from read_ddp_options.
std::shared_ptr<Ddp> joined_or_join(const StrategyRequest& r);

}  // namespace bellows::dist
