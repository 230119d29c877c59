// A build without CUDA has no NCCL; see backend.h.
#include <fmt/format.h>

#include "bellows/util/check.h"
#include "dist/backend.h"

namespace bellows::dist {

c10::intrusive_ptr<c10d::Backend> make_nccl_backend(const c10::intrusive_ptr<c10d::Store>&, int rank, int world_size,
                                                    std::chrono::milliseconds) {
  BELLOWS_FAIL(ErrorKind::kConfig, fmt::format("rank {} of {}: dist.backend nccl needs a CUDA build of bellows; this one has none", rank, world_size),
               "use dist.backend: gloo on the CPU, or build bellows with the CUDA toolkit");
}

}  // namespace bellows::dist
