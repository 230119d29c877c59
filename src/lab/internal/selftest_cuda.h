// The CUDA-only checks of `bellows selftest` (app/selftest.h): compiled from src/app/cuda/ into CUDA builds,
// otherwise from selftest_cuda_none.cpp, whose checks are skipped. Each returns the measurement behind a pass, and
// throws SelftestSkip when it cannot run here or SelftestFailure with the measurement that failed.
#pragma once

#include <c10/core/Device.h>

#include <functional>
#include <stdexcept>
#include <string>

namespace bellows::lab::internal {

struct SelftestSkip : std::runtime_error {
  using std::runtime_error::runtime_error;
};
struct SelftestFailure : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// Runs fn(rank) for ranks 0 and 1 on two threads (the all-reduce checks); the first rank's exception becomes a
// SelftestFailure "<what>: <its message>". Defined in selftest.cpp.
void run_two_ranks(const std::string& what, const std::function<void(int rank)>& fn);

// A pinned host buffer copied with non_blocking on a side stream while matrix products run on the compute stream,
// timed with CUDA events: the fraction of the shorter of the two that was hidden behind the other.
std::string cuda_copy_overlap(c10::Device device);
// A small MLP's whole training step (forward, backward, SGD update) captured into a CUDA graph after warm-up on a
// side stream; replays against the same steps run eagerly from the same weights (values and time).
std::string cuda_graph_replay(c10::Device device);
// A capture that fails (a step reading a value back) through the trainer's graph: afterwards random ops and
// allocations work, the capture's memory pool went back to the device, and a new capture replays.
std::string cuda_graph_failed_capture(c10::Device device);
// One all-reduce over NCCL between the first two GPUs (two ranks in threads); skipped with fewer GPUs.
std::string nccl_all_reduce();

}  // namespace bellows::lab::internal
