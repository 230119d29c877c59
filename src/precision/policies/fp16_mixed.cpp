// precision: fp16-mixed -- the forward under autocast to fp16 with dynamic loss scaling (GradScaler): steps whose
// gradients overflow are skipped and the scale backs off, by design. `auto`'s choice on GPUs with fp16 tensor cores
// but no bf16 (sm_70, sm_75).
#include "bellows/precision/registry.h"

namespace bellows::precision {
namespace {

PrecisionEntry fp16_mixed_policy() {
  PrecisionEntry e;
  e.name = "fp16-mixed";
  e.help = "autocast to fp16 with dynamic loss scaling (GradScaler)";
  e.order = 3;
  e.autocast = c10::kHalf;
  e.scales_loss = true;
  e.matmul_peak = "matmul_fp16";
  e.caveat = [](const DeviceFacts& d) -> std::string {
    if (d.cuda) return "";
    return d.fp16 ? "the CPU has AVX512_FP16, but LibTorch's CPU kernels mostly convert fp16 to fp32; bf16-mixed is the CPU's "
                    "mixed precision"
                  : "this CPU has no fp16 arithmetic (AVX512_FP16): fp16 is converted around fp32 kernels and can be many times "
                    "slower than fp32; use bf16-mixed or fp32 on the CPU";
  };
  e.auto_preference = 2;
  e.auto_reason = [](const DeviceFacts& d) -> std::optional<std::string> {
    if (!d.cuda || !d.fp16) return std::nullopt;
    return d.who + " has fp16 tensor cores but no bf16 (needs sm_80); fp16 needs dynamic loss scaling to keep small gradients";
  };
  e.worth_trying = [](const DeviceFacts& d) { return d.cuda && d.fp16; };
  return e;
}

const PrecisionRegistrar kFp16MixedPolicyRegistered(fp16_mixed_policy());

}  // namespace
}  // namespace bellows::precision
