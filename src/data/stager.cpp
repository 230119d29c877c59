// Device stagers; see stager.h. The CUDA stager lives in cuda/cuda_stager.cpp.
#include "bellows/data/stager.h"

#include <fmt/format.h>

#include <optional>

#include "bellows/util/check.h"

namespace bellows::data {

#ifdef BELLOWS_HAVE_CUDA
namespace detail {
std::unique_ptr<DeviceStager> make_cuda_stager(c10::Device device, bool pin_memory);  // cuda/cuda_stager.cpp
}
#endif

namespace {

class CpuStager final : public DeviceStager {
 public:
  explicit CpuStager(c10::Device device) : device_(device) {}
  c10::Device device() const override { return device_; }
  bool pins_memory() const override { return false; }
  void prepare_host(Batch&) const override {}
  void begin(Batch batch) override {
    BELLOWS_CHECK(!staged_, "DeviceStager::begin() while a batch is in flight", "report this bug");
    staged_ = batch.to(device_);
  }
  bool pending() const override { return staged_.has_value(); }
  Batch finish() override {
    BELLOWS_CHECK(staged_.has_value(), "DeviceStager::finish() without begin()", "report this bug");
    Batch out = std::move(*staged_);
    staged_.reset();
    return out;
  }

 private:
  c10::Device device_;
  std::optional<Batch> staged_;
};

}  // namespace

std::unique_ptr<DeviceStager> make_cpu_stager(c10::Device device) { return std::make_unique<CpuStager>(device); }

std::unique_ptr<DeviceStager> make_stager(c10::Device device, bool pin_memory) {
  if (device.is_cpu()) return make_cpu_stager(device);
#ifdef BELLOWS_HAVE_CUDA
  if (device.is_cuda()) return detail::make_cuda_stager(device, pin_memory);
#endif
  BELLOWS_FAIL(ErrorKind::kResource, fmt::format("no data stager for device {} in this build", device.str()),
               "build bellows with CUDA (BELLOWS_WITH_CUDA=ON), or use device: cpu");
}

}  // namespace bellows::data
