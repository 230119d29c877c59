// precision: bf16-mixed -- the forward under autocast to bf16 (CPU and CUDA); bf16 keeps fp32's range, so no loss
// scaling. `auto`'s first choice wherever the device has native bf16 products.
#include "bellows/precision/registry.h"

namespace bellows::precision {
namespace {

PrecisionEntry bf16_mixed_policy() {
  PrecisionEntry e;
  e.name = "bf16-mixed";
  e.help = "autocast to bf16 (CPU and CUDA); no loss scaling";
  e.order = 2;
  e.autocast = c10::kBFloat16;
  e.matmul_peak = "matmul_bf16";
  e.caveat = [](const DeviceFacts& d) -> std::string {
    if (d.bf16) return "";
    return d.cuda ? "this GPU has no bf16 tensor cores (needs sm_80)"
                  : d.no_bf16_why + ": no native bf16, so bf16 is emulated and may be slower than fp32";
  };
  e.auto_preference = 3;
  e.auto_reason = [](const DeviceFacts& d) -> std::optional<std::string> {
    if (!d.bf16) return std::nullopt;
    if (d.cuda) return d.who + " has bf16 tensor cores (sm_80+); bf16 keeps fp32's range, so no loss scaling is needed";
    return "CPU has " + d.bf16_units + ": native bf16 dot products that oneDNN uses for matmuls and convolutions under autocast";
  };
  e.worth_trying = [](const DeviceFacts& d) { return d.bf16; };
  return e;
}

const PrecisionRegistrar kBf16MixedPolicyRegistered(bf16_mixed_policy());

}  // namespace
}  // namespace bellows::precision
