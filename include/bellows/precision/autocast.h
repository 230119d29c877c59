// RAII autocast: LibTorch's C++ API has the autocast switches (ATen/autocast_mode.h) but no guard. This one
// sets enabled + dtype for one device type, counts nesting, clears the cast cache when the outermost guard
// exits, and restores the previous state. Autocast state is thread-local in ATen, so is this guard: destroy it
// on the thread that made it, in reverse order of construction (it is a scope guard, not a handle).
#pragma once

#include <c10/core/DeviceType.h>
#include <c10/core/ScalarType.h>

namespace bellows::precision {

class AutocastGuard {
 public:
  // enabled: autocast to `dtype` (kBFloat16 or kHalf) on `device_type` inside the scope; a device type without
  // autocast or another dtype is a kConfig error. Disabled: autocast is off for `device_type` inside the
  // scope (an fp32 region), `dtype` is not checked and the current autocast dtype is kept.
  AutocastGuard(c10::DeviceType device_type, c10::ScalarType dtype, bool enabled = true);
  ~AutocastGuard();
  AutocastGuard(const AutocastGuard&) = delete;
  AutocastGuard& operator=(const AutocastGuard&) = delete;

  c10::DeviceType device_type() const { return device_type_; }
  bool enabled() const { return enabled_; }

 private:
  c10::DeviceType device_type_;
  bool enabled_;
  bool prev_enabled_;
  c10::ScalarType prev_dtype_;
};

}  // namespace bellows::precision
