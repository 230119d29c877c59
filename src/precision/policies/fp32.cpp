// precision: fp32 -- full fp32; TF32 off (cuDNN convolutions default to TF32 on in PyTorch). `auto`'s choice where
// the device has nothing faster.
#include "bellows/precision/registry.h"

namespace bellows::precision {
namespace {

PrecisionEntry fp32_policy() {
  PrecisionEntry e;
  e.name = "fp32";
  e.help = "full fp32; TF32 off";
  e.order = 0;
  e.tf32 = false;
  e.matmul_peak = "matmul_fp32";
  e.caveat = [](const DeviceFacts&) { return std::string(); };
  e.auto_preference = 1;  // always possible: the fallback
  e.auto_reason = [](const DeviceFacts& d) -> std::optional<std::string> {
    if (d.cuda) return d.who + " has no tensor cores (needs sm_70); mixed precision would not be faster";
    return d.no_bf16_why + ": bf16 would be converted in software and run slower than fp32";
  };
  e.worth_trying = [](const DeviceFacts& d) { return !(d.cuda && d.tf32); };  // tf32 is tried instead where it exists
  return e;
}

const PrecisionRegistrar kFp32PolicyRegistered(fp32_policy());

}  // namespace
}  // namespace bellows::precision
