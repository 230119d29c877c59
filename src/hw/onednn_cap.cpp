// Reads the oneDNN ISA cap. The names and their order are oneDNN's `dnnl_cpu_isa_t` (oneDNN 3.x developer guide);
// each admits the ones before it. Checked on LibTorch 2.13: a lower-case value caps too, an unknown one does not.
#include "bellows/hw/onednn_cap.h"

#include <algorithm>
#include <array>
#include <cctype>
#include <cstdlib>
#include <string_view>

namespace bellows::hw {
namespace {

struct Level {
  std::string_view name;
  bool avx512_bf16;
  bool avx512_fp16;
  bool amx;
};

constexpr std::array kLevels = {
    Level{"SSE41", false, false, false},
    Level{"AVX", false, false, false},
    Level{"AVX2", false, false, false},
    Level{"AVX2_VNNI", false, false, false},
    Level{"AVX2_VNNI_2", false, false, false},
    Level{"AVX512_CORE", false, false, false},
    Level{"AVX512_CORE_VNNI", false, false, false},
    Level{"AVX512_CORE_BF16", true, false, false},
    Level{"AVX10_1_512", true, true, false},
    Level{"AVX512_CORE_FP16", true, true, false},  // AVX10_1_512's older name
    Level{"AVX10_1_512_AMX", true, true, true},
    Level{"AVX512_CORE_AMX", true, true, true},  // AVX10_1_512_AMX's older name
    Level{"AVX10_1_512_AMX_FP16", true, true, true},
    Level{"AVX512_CORE_AMX_FP16", true, true, true},
    Level{"DEFAULT", true, true, true},  // the library's own choice: no cap
    Level{"ALL", true, true, true},
};

std::string upper(std::string_view text) {
  std::string out(text);
  std::transform(out.begin(), out.end(), out.begin(), [](unsigned char ch) { return static_cast<char>(std::toupper(ch)); });
  return out;
}

}  // namespace

std::optional<OnednnIsaCap> onednn_isa_cap(const char* onednn_max_cpu_isa, const char* dnnl_max_cpu_isa) {
  if (onednn_max_cpu_isa == nullptr && dnnl_max_cpu_isa == nullptr) return std::nullopt;
  OnednnIsaCap cap;
  cap.variable = onednn_max_cpu_isa != nullptr ? "ONEDNN_MAX_CPU_ISA" : "DNNL_MAX_CPU_ISA";
  cap.value = onednn_max_cpu_isa != nullptr ? onednn_max_cpu_isa : dnnl_max_cpu_isa;
  const std::string name = upper(cap.value);
  const auto* level = std::find_if(kLevels.begin(), kLevels.end(), [&](const Level& l) { return l.name == name; });
  if (level == kLevels.end()) return cap;  // ignored by oneDNN: no cap
  cap.recognised = true;
  cap.avx512_bf16 = level->avx512_bf16;
  cap.avx512_fp16 = level->avx512_fp16;
  cap.amx = level->amx;
  return cap;
}

std::optional<OnednnIsaCap> onednn_isa_cap() {
  return onednn_isa_cap(std::getenv("ONEDNN_MAX_CPU_ISA"), std::getenv("DNNL_MAX_CPU_ISA"));
}

}  // namespace bellows::hw
