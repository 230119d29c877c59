// The run's strategy; see strategy_setup.h.
#include "bellows/app/strategy_setup.h"

#include "bellows/app/data_setup.h"

#include "bellows/config/schema.h"

#include <ATen/ATen.h>
#include <fmt/format.h>

#include <cstring>

#include "bellows/ckpt/checksum.h"
#include "bellows/dist/registry.h"
#include "bellows/util/check.h"

namespace bellows::app {

dist::ProcessInfo process_info(const config::Config& c) {
  const dist::ProcessInfo p = dist::detect_process();
  const std::string name = config::get_string(c, "dist.strategy");
  BELLOWS_CHECK_CONFIG(name == "auto" || dist::find_strategy(name).several_processes || !p.distributed(),
                       fmt::format("dist.strategy is {} ({}), but the environment names {} processes ({})", name, c.origin("dist.strategy").str(),
                                   p.world_size, p.reason),
                       "use dist.strategy: auto or one for several processes under a launcher, or start one process");
  return p;
}

StrategySetup make_strategy(const config::Config& c, const dist::ProcessInfo& process, const plan::Plan& plan) {
  const std::string asked = config::get_string(c, "dist.strategy");
  const dist::StrategyEntry& entry = asked == "auto" ? dist::auto_strategy(process.world_size) : dist::find_strategy(asked);
  StrategySetup s;
  s.strategy = entry.make(dist::StrategyRequest{c, process, plan.device, ckpt::sha256_hex(c.to_yaml()).substr(0, 16), nullptr});
  if (!entry.several_processes) {
    s.entry = {"strategy", entry.name, asked == "auto" ? "one process: " + process.reason : "requested"};
    return s;
  }
  s.by_memory = asked == "auto";
  // data.batch_size is per process, as in PyTorch's DDP: an optimizer step sees world x batch x accumulation samples.
  const std::int64_t batch = loaded_batch_size(c, process.world_size);
  const std::int64_t k = config::get_int(c, "train.accumulation_steps");
  s.entry = {"strategy", entry.name,
             fmt::format("{}; global batch {} = {} ranks x {}{}; {}{}", s.strategy->describe(), process.world_size * batch * k, process.world_size,
                         batch, k > 1 ? fmt::format(" x {} micro-batches", k) : "", asked == "auto" ? "" : "requested; ", process.reason)};
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
