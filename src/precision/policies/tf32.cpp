// precision: tf32 -- fp32 tensors, fp32 matmuls and convolutions on TF32 tensor cores on CUDA (10-bit mantissa, fp32
// range); no effect on the CPU, whose matmuls stay IEEE fp32.
#include "bellows/precision/registry.h"

namespace bellows::precision {
namespace {

PrecisionEntry tf32_policy() {
  PrecisionEntry e;
  e.name = "tf32";
  e.help = "fp32 tensors, TF32 tensor-core matmuls and convolutions on CUDA (no effect on the CPU)";
  e.order = 1;
  e.tf32 = true;
  e.matmul_peak = "matmul_fp32_tf32";
  e.caveat = [](const DeviceFacts& d) {
    return d.cuda ? std::string() : std::string("TF32 exists on CUDA only, so on the CPU this computes in fp32");
  };
  e.worth_trying = [](const DeviceFacts& d) { return d.cuda && d.tf32; };
  return e;
}

const PrecisionRegistrar kTf32PolicyRegistered(tf32_policy());

}  // namespace
}  // namespace bellows::precision
