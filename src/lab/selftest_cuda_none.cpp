// The CUDA-only checks of `bellows selftest` in a build without CUDA: skipped, saying why.
#include "lab/internal/selftest_cuda.h"

namespace bellows::lab::internal {
namespace {
constexpr const char* kNoCuda = "bellows was built without its CUDA paths (LibTorch without CUDA, no toolkit, or BELLOWS_WITH_CUDA=OFF)";
}  // namespace

std::string cuda_copy_overlap(c10::Device) { throw SelftestSkip(kNoCuda); }
std::string cuda_graph_replay(c10::Device) { throw SelftestSkip(kNoCuda); }
std::string cuda_graph_failed_capture(c10::Device) { throw SelftestSkip(kNoCuda); }
std::string nccl_all_reduce() { throw SelftestSkip(kNoCuda); }

}  // namespace bellows::lab::internal
