// AutocastGuard over ATen's thread-local autocast switches, mirroring Python's torch.autocast __enter__/__exit__:
// save (enabled, dtype), set them, bump the nesting count; on exit clear the cast cache if this was the
// outermost autocast region, then restore.
#include "bellows/precision/autocast.h"

#include <ATen/autocast_mode.h>
#include <fmt/format.h>

#include "bellows/util/check.h"

namespace bellows::precision {

AutocastGuard::AutocastGuard(c10::DeviceType device_type, c10::ScalarType dtype, bool enabled)
    : device_type_(device_type), enabled_(enabled) {
  BELLOWS_CHECK_CONFIG(at::autocast::is_autocast_available(device_type),
                       fmt::format("autocast is not available for device type {}", c10::DeviceTypeName(device_type)),
                       "use precision fp32 or tf32 on this device");
  if (enabled) {
    BELLOWS_CHECK_CONFIG(dtype == at::kBFloat16 || dtype == at::kHalf,
                         fmt::format("autocast dtype {} is not supported (bf16 or fp16)", c10::toString(dtype)),
                         "use precision bf16-mixed or fp16-mixed");
  }
  prev_enabled_ = at::autocast::is_autocast_enabled(device_type);
  prev_dtype_ = at::autocast::get_autocast_dtype(device_type);
  at::autocast::set_autocast_enabled(device_type, enabled);
  if (enabled) at::autocast::set_autocast_dtype(device_type, dtype);
  at::autocast::increment_nesting();
}

AutocastGuard::~AutocastGuard() {
  // Cached casts (fp32 weights -> bf16/fp16 copies) are only valid within one forward; drop them when the
  // outermost region ends so that updated weights are cast afresh next time.
  if (at::autocast::decrement_nesting() == 0) at::autocast::clear_cache();
  at::autocast::set_autocast_enabled(device_type_, prev_enabled_);
  at::autocast::set_autocast_dtype(device_type_, prev_dtype_);
}

}  // namespace bellows::precision
