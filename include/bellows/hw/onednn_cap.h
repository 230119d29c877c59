// The cap a process sets on oneDNN's instruction sets. oneDNN runs LibTorch's CPU matmuls and convolutions and
// dispatches to at most the ISA named by ONEDNN_MAX_CPU_ISA (or the older DNNL_MAX_CPU_ISA), read once per
// process. A cap below AVX512_CORE_BF16 keeps bf16 products off AVX512_BF16 (and AMX): they then ran 2-70x slower
// than fp32 (docs/hw.md), so what the CPU has is not what its kernels use.
#pragma once

#include <optional>
#include <string>

namespace bellows::hw {

struct OnednnIsaCap {
  std::string variable;      // "ONEDNN_MAX_CPU_ISA" or "DNNL_MAX_CPU_ISA"
  std::string value;         // as set
  bool recognised = false;   // a name oneDNN knows; it ignores any other (no cap)
  bool avx512_bf16 = true;   // the cap admits AVX512_BF16 (AVX512_CORE_BF16 and above)
  bool avx512_fp16 = true;   // the cap admits AVX512_FP16 (AVX10_1_512 and above)
  bool amx = true;           // the cap admits AMX (AVX512_CORE_AMX and above)
};

// From the two variables' values (nullptr: not set); ONEDNN_MAX_CPU_ISA wins when both are set, as in oneDNN. None
// when neither is set. Pure, for tests; `onednn_isa_cap()` reads this process's environment.
std::optional<OnednnIsaCap> onednn_isa_cap(const char* onednn_max_cpu_isa, const char* dnnl_max_cpu_isa);
std::optional<OnednnIsaCap> onednn_isa_cap();

}  // namespace bellows::hw
