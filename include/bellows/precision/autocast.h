// RAII autocast: LibTorch's C++ API has the autocast switches (ATen/autocast_mode.h) but no guard. This one
// sets enabled + dtype for one device type, counts nesting, clears the cast cache when the outermost guard
// exits, and restores the previous state. Autocast state is thread-local in ATen, so is this guard.
#pragma once

#include <c10/core/DeviceType.h>
#include <c10/core/ScalarType.h>

namespace bellows::precision {

class AutocastGuard {
 public:
  AutocastGuard(c10::DeviceType device_type, c10::ScalarType dtype, bool enabled = true);
  ~AutocastGuard();
  AutocastGuard(const AutocastGuard&) = delete;
  AutocastGuard& operator=(const AutocastGuard&) = delete;

 private:
  c10::DeviceType device_type_;
  bool prev_enabled_;
  c10::ScalarType prev_dtype_;
};

}  // namespace bellows::precision
