// NCCL process groups for CUDA tensors; see backend.h.
#define USE_C10D_NCCL 1  // c10d's NCCL header is wrapped in it (TorchConfig.cmake does not export the define)
#include <fmt/format.h>
#include <nccl.h>
#include <torch/csrc/cuda/nccl.h>
#include <torch/csrc/distributed/c10d/ProcessGroupNCCL.hpp>

#include <cstdint>

#include "bellows/util/check.h"
#include "dist/backend.h"
#include "bellows/util/cuda_units.h"  // defines: register_cuda_unit

namespace bellows::dist {

c10::intrusive_ptr<c10d::Backend> make_nccl_backend(const c10::intrusive_ptr<c10d::Store>& store, int rank, int world_size,
                                                    std::chrono::milliseconds timeout) {
  // The header this was compiled with against the library LibTorch loaded: c10d's options hold an ncclConfig_t
  // whose layout changes between releases (the configure checks the wheel's pair; this catches any other).
  const std::uint64_t loaded = torch::cuda::nccl::version();  // major << 32 | minor << 16 | patch
  const auto major = static_cast<int>(loaded >> 32), minor = static_cast<int>((loaded >> 16) & 0xffff);
  BELLOWS_CHECK_KIND(ErrorKind::kResource, loaded == 0 || (major == NCCL_MAJOR && minor == NCCL_MINOR),
                     fmt::format("rank {}: bellows was compiled with NCCL {}.{}.{}'s header, but LibTorch loaded NCCL {}.{}.{}", rank,
                                 NCCL_MAJOR, NCCL_MINOR, NCCL_PATCH, major, minor, loaded & 0xffff),
                     "rebuild bellows against the torch it runs with (its nvidia-nccl package's header comes first)");
  auto options = c10d::ProcessGroupNCCL::Options::create();
  options->timeout = timeout;
  try {
    return c10::make_intrusive<c10d::ProcessGroupNCCL>(store, rank, world_size, options);
  } catch (const std::exception& e) {
    BELLOWS_FAIL(ErrorKind::kResource, fmt::format("rank {} of {}: the NCCL process group could not start: {}", rank, world_size, first_line(e)),
                 "check that every rank has its own GPU (device cuda:<local rank>) and that NCCL can reach the other nodes");
  }
}

}  // namespace bellows::dist

namespace {
const bool kRegisteredNcclBackend = bellows::util::register_cuda_unit("dist/nccl_backend");  // util/cuda_units.h
}  // namespace
