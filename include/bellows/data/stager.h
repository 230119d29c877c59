// Moving batches to the training device. On CUDA, workers put each batch in page-locked (pinned) host memory,
// and the training thread copies it with non_blocking on a side stream while the previous step computes;
// the compute stream waits on an event recorded after the copy, and the tensors are marked as used by the
// compute stream so the caching allocator does not hand their memory out early. On the CPU the same calls
// run without pinning or streams: the CPU twin that the tests exercise. The Loader drives a stager one batch
// ahead: begin(k + 1) is issued before batch k is handed to the training step.
#pragma once

#include <c10/core/Device.h>

#include <memory>

#include "bellows/data/batch.h"  // defines: Batch

namespace bellows::data {

class DeviceStager {
 public:
  virtual ~DeviceStager() = default;
  virtual c10::Device device() const = 0;
  virtual bool pins_memory() const = 0;
  // In a worker thread, after collation: make the batch ready for an asynchronous copy (pin it) or leave it.
  virtual void prepare_host(Batch& batch) const = 0;
  // In the training thread: start moving `batch` to the device. At most one batch is in flight.
  virtual void begin(Batch batch) = 0;
  virtual bool pending() const = 0;
  // In the training thread: the batch begun last, safe to use on the current (compute) stream.
  virtual Batch finish() = 0;
};

// CPU devices: the CPU twin (pin_memory is ignored: there is no device copy to overlap). CUDA devices: the
// stream-and-event stager, compiled only into CUDA builds; asking for it in another build is a kResource error.
std::unique_ptr<DeviceStager> make_stager(c10::Device device, bool pin_memory);

// The CPU twin, also usable as a test double: begin() copies with Batch::to(device), finish() returns it.
std::unique_ptr<DeviceStager> make_cpu_stager(c10::Device device = c10::Device(c10::kCPU));

}  // namespace bellows::data
