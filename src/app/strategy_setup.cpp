// The run's strategy; see strategy_setup.h.
#include "bellows/app/strategy_setup.h"

#include "bellows/app/data_setup.h"

#include "bellows/config/schema.h"

#include <ATen/ATen.h>
#include <fmt/format.h>

#include <cstring>

#include "bellows/ckpt/checksum.h"
#include "bellows/dist/ddp.h"
#include "bellows/util/check.h"

namespace bellows::app {

dist::ProcessInfo process_info(const config::Config& c) {
  const dist::ProcessInfo p = dist::detect_process();
  const std::string strategy = config::get_string(c, "dist.strategy");
  BELLOWS_CHECK_CONFIG(strategy != "single" || !p.distributed(),
                       fmt::format("dist.strategy is single ({}), but the environment names {} processes ({})", c.origin("dist.strategy").str(),
                                   p.world_size, p.reason),
                       "use dist.strategy: auto or ddp under a launcher, or start one process");
  return p;
}

StrategySetup make_strategy(const config::Config& c, const dist::ProcessInfo& process, const plan::Plan& plan) {
  StrategySetup s;
  const std::string strategy = config::get_string(c, "dist.strategy");
  if (strategy == "single" || (strategy == "auto" && !process.distributed())) {
    s.strategy = std::make_shared<dist::SingleDevice>();
    s.entry = {"strategy", "single", strategy == "single" ? "requested" : "one process: " + process.reason};
    return s;
  }
  dist::DdpOptions o;
  const std::string backend = config::get_string(c, "dist.backend");
  o.backend = backend == "auto" ? (plan.device.is_cuda() ? "nccl" : "gloo") : backend;
  BELLOWS_CHECK_CONFIG(o.backend != "nccl" || plan.device.is_cuda(),
                       fmt::format("dist.backend is nccl ({}) but the device is {}", c.origin("dist.backend").str(), plan.device.str()),
                       "NCCL reduces CUDA tensors: use dist.backend: gloo (or auto) on the CPU");
  o.bucket_mb = config::get_double(c, "dist.bucket_mb");
  o.timeout_s = config::get_double(c, "dist.timeout_s");
  o.broadcast_buffers = config::get_bool(c, "dist.broadcast_buffers");
  o.config_hash = ckpt::sha256_hex(c.to_yaml()).substr(0, 16);
  auto ddp = std::make_shared<dist::Ddp>(process, o);
  // data.batch_size is per process, as in PyTorch's DDP: an optimizer step sees world x batch x accumulation samples.
  const std::int64_t batch = loaded_batch_size(c, process.world_size);
  const std::int64_t k = config::get_int(c, "train.accumulation_steps");
  s.entry = {"strategy", "ddp",
             fmt::format("{}; global batch {} = {} ranks x {}{}; {}{}", ddp->describe(), process.world_size * batch * k, process.world_size, batch,
                         k > 1 ? fmt::format(" x {} micro-batches", k) : "", strategy == "ddp" ? "requested; " : "", process.reason)};
  s.strategy = std::move(ddp);
  return s;
}

std::string broadcast_text(dist::Strategy& strategy, const std::string& text) {
  if (strategy.world_size() == 1) return text;
  std::vector<at::Tensor> length{at::full({1}, static_cast<std::int64_t>(text.size()), at::kLong)};
  strategy.broadcast(length, 0);
  const std::int64_t n = length[0].item<std::int64_t>();
  std::vector<at::Tensor> bytes{at::zeros({std::max<std::int64_t>(n, 1)}, at::kByte)};
  if (strategy.is_main()) std::memcpy(bytes[0].data_ptr(), text.data(), text.size());
  strategy.broadcast(bytes, 0);
  return std::string(static_cast<const char*>(bytes[0].data_ptr()), static_cast<std::size_t>(n));
}

}  // namespace bellows::app
