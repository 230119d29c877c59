// The CUDA device stager (compiled only into CUDA builds; the CPU twin is in ../stager.cpp): pinned host
// batches, copied with non_blocking on a side stream, an event the compute stream waits on, and
// record_stream so the caching allocator keeps the copies' memory until the compute stream is done with it.
#include <c10/cuda/CUDAEvent.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <fmt/format.h>

#include <optional>

#include "bellows/data/stager.h"
#include "bellows/util/check.h"
#include "bellows/util/cuda_units.h"  // defines: register_cuda_unit

namespace bellows::data::detail {
namespace {

class CudaStager final : public DeviceStager {
 public:
  CudaStager(c10::Device device, bool pin_memory)
      : device_(device), pin_(pin_memory), copy_stream_(c10::cuda::getStreamFromPool(false, device.index())) {}

  c10::Device device() const override { return device_; }
  bool pins_memory() const override { return pin_; }

  void prepare_host(Batch& batch) const override {
    if (!pin_) return;
    for (auto& [name, t] : batch.tensors) {
      if (t.is_cpu() && !t.is_pinned()) t = t.pin_memory();
    }
  }

  void begin(Batch batch) override {
    BELLOWS_CHECK(!staged_, "DeviceStager::begin() while a batch is in flight", "report this bug");
    c10::cuda::CUDAStreamGuard guard(copy_stream_);
    Batch out;
    out.size = batch.size;
    // Pinned sources copy asynchronously on copy_stream_; pageable ones are staged by the driver (synchronous).
    for (const auto& [name, t] : batch.tensors) out.tensors.emplace(name, t.to(device_, /*non_blocking=*/pin_));
    copied_.record(copy_stream_);
    staged_ = std::move(out);
    host_ = std::move(batch);  // the pinned source stays alive until the copy is known to be complete
  }

  bool pending() const override { return staged_.has_value(); }

  Batch finish() override {
    BELLOWS_CHECK(staged_.has_value(), "DeviceStager::finish() without begin()", "report this bug");
    const c10::cuda::CUDAStream compute = c10::cuda::getCurrentCUDAStream(device_.index());
    copied_.block(compute);  // the compute stream waits for the copy, the host thread does not
    Batch out = std::move(*staged_);
    staged_.reset();
    for (auto& [name, t] : out.tensors) t.record_stream(compute.unwrap());
    host_.reset();  // safe: the caching host allocator tracks the copy's stream for pinned blocks
    return out;
  }

 private:
  c10::Device device_;
  bool pin_;
  c10::cuda::CUDAStream copy_stream_;
  c10::cuda::CUDAEvent copied_;
  std::optional<Batch> staged_;
  std::optional<Batch> host_;
};

}  // namespace

std::unique_ptr<DeviceStager> make_cuda_stager(c10::Device device, bool pin_memory) {
  BELLOWS_CHECK_RESOURCE(device.is_cuda(), fmt::format("the CUDA stager got device {}", device.str()), "report this bug");
  return std::make_unique<CudaStager>(device, pin_memory);
}

}  // namespace bellows::data::detail

namespace {
const bool kRegisteredCudaStager = bellows::util::register_cuda_unit("data/cuda_stager");  // util/cuda_units.h
}  // namespace
