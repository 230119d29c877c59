// Process groups by backend name; see backend.h.
#define USE_C10D_GLOO 1  // c10d's Gloo header is wrapped in it (TorchConfig.cmake does not export the define)
#include "dist/backend.h"

#include <fmt/format.h>
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>

#include <cstdlib>

#include "bellows/util/check.h"

namespace bellows::dist {

std::string first_line(const std::exception& e) {
  std::string what = e.what();
  what.resize(std::min(what.find('\n'), what.size()));
  return what;
}

c10::intrusive_ptr<c10d::Backend> make_backend(const std::string& name, const c10::intrusive_ptr<c10d::Store>& store, int rank,
                                               int world_size, std::chrono::milliseconds timeout) {
  if (name == "nccl") return make_nccl_backend(store, rank, world_size, timeout);
  BELLOWS_CHECK_CONFIG(name == "gloo", fmt::format("unknown dist.backend '{}'", name), "use gloo (CPU) or nccl (CUDA)");
  auto options = c10d::ProcessGroupGloo::Options::create(timeout);
  // GLOO_SOCKET_IFNAME picks the network interface, as in PyTorch; otherwise the address this host's name
  // resolves to, or the loopback device.
  const char* ifname = std::getenv("GLOO_SOCKET_IFNAME");
  try {
    options->devices.push_back(ifname && *ifname ? c10d::ProcessGroupGloo::createDeviceForInterface(ifname)
                                                 : c10d::ProcessGroupGloo::createDefaultDevice());
    return c10::make_intrusive<c10d::ProcessGroupGloo>(store, rank, world_size, options);
  } catch (const std::exception& e) {
    BELLOWS_FAIL(ErrorKind::kResource, fmt::format("rank {} of {}: the Gloo process group could not connect: {}", rank, world_size, first_line(e)),
                 "check that the ranks can reach each other; GLOO_SOCKET_IFNAME=<interface> picks the network interface");
  }
}

}  // namespace bellows::dist
