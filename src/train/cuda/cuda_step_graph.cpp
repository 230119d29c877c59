// The CUDA graph of a training step (train/step_graph.h): warm-up and capture on a side stream, replay on the
// current one. The graph's memory comes from its own pool of the caching allocators (device and pinned host),
// kept until the graph goes, and given back at once when the capture fails.
#include <ATen/core/CachingHostAllocator.h>
#include <ATen/cuda/CUDAEvent.h>
#include <ATen/cuda/CUDAGeneratorImpl.h>
#include <ATen/cuda/CUDAGraph.h>
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAFunctions.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <fmt/format.h>

#include <cstdint>
#include <memory>
#include <mutex>

#include "bellows/train/step_graph.h"
#include "bellows/util/check.h"
#include "bellows/util/cuda_units.h"  // defines: register_cuda_unit

namespace bellows::train {
namespace {

class CudaStepGraph final : public StepGraph {
 public:
  explicit CudaStepGraph(c10::Device device)
      : device_(device), side_(c10::cuda::getStreamFromPool(false, device.index())) {}

  void warm_up(const std::function<void()>& step) override { on_side_stream(step, /*capture=*/false); }
  void capture(const std::function<void()>& step) override { on_side_stream(step, /*capture=*/true); }
  void replay() override {
    BELLOWS_CHECK(captured_, "replay() of a CUDA graph before capture()", "report this bug");
    graph_->replay();
  }
  std::string kind() const override { return "cuda graph"; }
  void synchronize() override {
    c10::cuda::CUDAGuard guard(device_);
    c10::cuda::device_synchronize();
  }
  // The segments of the caching allocator that the graph's private pool owns.
  std::int64_t held_bytes() const override {
    if (!captured_) return 0;
    const c10::MempoolId_t pool = graph_->pool();
    std::int64_t bytes = 0;
    for (const auto& segment : c10::cuda::CUDACachingAllocator::snapshot().segments) {
      if (segment.device == device_.index() && segment.owner_private_pool_id == pool) bytes += static_cast<std::int64_t>(segment.total_size);
    }
    return bytes;
  }

 private:
  // The side stream starts after the work queued so far and the current stream waits for what it did.
  void on_side_stream(const std::function<void()>& step, bool capture) {
    c10::cuda::CUDAGuard guard(device_);
    const auto current = c10::cuda::getCurrentCUDAStream(device_.index());
    at::cuda::CUDAEvent before, after;
    before.record(current);
    before.block(side_);
    {
      c10::cuda::CUDAStreamGuard on_side(side_);
      if (capture) {
        // The default generator's position before the capture: a failed capture leaves its state "capturing"
        // (CUDAGraph::capture_end throws before its epilogue), and every later random op of the eager steps would
        // throw "Offset increment outside graph capture"; a fresh state at the same position replaces it.
        at::Generator gen = at::cuda::detail::getDefaultCUDAGenerator(device_.index());
        auto* impl = at::check_generator<at::CUDAGeneratorImpl>(gen);
        std::uint64_t seed = 0, offset = 0;
        {
          std::lock_guard<std::mutex> lock(gen.mutex());
          seed = impl->current_seed();
          offset = impl->philox_offset_per_thread();
        }
        // What the warm-up left cached goes back to the device first, as PyTorch's graph helper does: the capture
        // allocates from a pool of its own, and a large model would otherwise run out of memory there.
        c10::cuda::device_synchronize();
        c10::cuda::CUDACachingAllocator::emptyCache();
        // An explicit pool, so that a failed capture can end and release it (below).
        const c10::MempoolId_t pool = at::cuda::graph_pool_handle();
        // Thread-local capture: the data workers' pinned allocations (cudaHostAlloc) on other threads stay legal
        // during the capture instead of invalidating it (global mode, the default, forbids them process-wide).
        graph_->capture_begin(pool, cudaStreamCaptureModeThreadLocal);
        bool stepped = false;
        try {
          step();
          stepped = true;
          graph_->capture_end();  // throws when the capture was invalidated; the stream's capture mode ends anyway
        } catch (...) {
          if (!stepped) {
            try {
              graph_->capture_end();  // ends the stream's capture mode the step's error left open
            } catch (...) {
            }
          }
          {
            std::lock_guard<std::mutex> lock(gen.mutex());
            auto fresh = c10::make_intrusive<at::CUDAGeneratorImpl>(device_.index());
            fresh->set_current_seed(seed);
            fresh->set_philox_offset_per_thread(offset);
            impl->graphsafe_set_state(fresh);
          }
          release_failed_pool(pool);
          graph_ = std::make_unique<at::cuda::CUDAGraph>();  // the partial graph goes
          throw;
        }
        captured_ = true;
      } else {
        step();
      }
    }
    after.record(side_);
    after.block(current);
  }

  // CUDAGraph::capture_end throws before it ends the allocators' capture into `pool` when the capture was invalidated
  // (cudaStreamEndCapture fails), and the graph releases its pool only after a capture that ended: the allocators
  // would keep routing this stream's allocations through the capture's filter and never free the pool's blocks.
  // Ending a capture that capture_end did end throws; both are ignored. The pool's blocks go back to the device once
  // the tensors allocated in the capture are gone (the optimizer's new state is dropped by GraphStep).
  void release_failed_pool(c10::MempoolId_t pool) {
    bool graph_owns_pool = false;  // pool() answers only after a capture that ended; the graph's reset releases it then
    try {
      graph_->pool();
      graph_owns_pool = true;
    } catch (...) {
    }
    if (graph_owns_pool) return;
    try {
      c10::cuda::CUDACachingAllocator::endAllocateToPool(device_.index(), pool);
    } catch (...) {
    }
    try {
      at::getHostAllocator(at::kCUDA)->end_allocate_to_pool(pool);
    } catch (...) {
    }
    c10::cuda::CUDACachingAllocator::releasePool(device_.index(), pool);
    at::getHostAllocator(at::kCUDA)->release_pool(pool);
  }

  c10::Device device_;
  c10::cuda::CUDAStream side_;
  std::unique_ptr<at::cuda::CUDAGraph> graph_ = std::make_unique<at::cuda::CUDAGraph>();
  bool captured_ = false;
};

}  // namespace

std::unique_ptr<StepGraph> make_cuda_step_graph(c10::Device device) {
  BELLOWS_CHECK_KIND(ErrorKind::kResource, device.is_cuda() && device.has_index(),
                     fmt::format("compile: cuda_graph on {}: a CUDA graph needs a CUDA device with an index", device.str()), "set device: cuda:0");
  return std::make_unique<CudaStepGraph>(device);
}

}  // namespace bellows::train

namespace {
const bool kRegisteredCudaStepGraph = bellows::util::register_cuda_unit("train/cuda_step_graph");  // util/cuda_units.h
}  // namespace
