// The precision-policy registry: each policy (fp32, tf32, bf16-mixed, fp16-mixed, or a C++ user's) registers a
// PrecisionEntry from its own file (src/precision/policies/), like a model or a data source. An entry carries what
// the rest of bellows asks about a policy instead of comparing its name: how it computes (autocast dtype, TF32, loss
// scaling), which measured matmul peak its MFU divides by, and what it needs from the device (a caveat for the plan
// table, whether `auto` picks it and why, whether the tuner tries it). hw/ describes a device as DeviceFacts;
// plan/, hw's recommendations, the tuner, the doctor, the matrix and the trainer ask the entry.
#pragma once

#include <c10/core/Device.h>
#include <c10/core/ScalarType.h>

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "bellows/precision/grad_scaler.h"  // defines: GradScalerOptions

namespace bellows::precision {

class Precision;

// What a policy needs to know of the device it would run on (hw::device_facts fills it from the hardware report).
struct DeviceFacts {
  bool cuda = false;
  std::string who;         // "GPU 0 (NVIDIA A100, compute capability 8.0)", or "CPU"
  bool bf16 = false;       // native bf16 products: a GPU's bf16 tensor cores (sm_80+), a CPU's AVX512_BF16 or AMX-BF16
  std::string bf16_units;  // a CPU's: "AMX-BF16 and AVX512_BF16", "AVX512_BF16", ...
  // a CPU's reason, where bf16 is not native; hw::device_facts names the cap (ONEDNN_MAX_CPU_ISA) where one keeps
  // oneDNN off the CPU's bf16 units
  std::string no_bf16_why = "CPU lacks AVX512_BF16 and AMX-BF16";
  bool fp16 = false;       // a GPU's fp16 tensor cores (sm_70+); a CPU's AVX512_FP16
  bool tf32 = false;       // a GPU's TF32 tensor cores (sm_80+)
};

struct PrecisionEntry {
  std::string name;  // the config's word: precision: bf16-mixed
  std::string help;  // one line for `bellows config keys`
  int order = 0;     // place in listings (precision_names): the most exact first
  // --- how it computes ---
  std::optional<c10::ScalarType> autocast;  // the forward's dtype under autocast; none: fp32 compute
  std::optional<bool> tf32;                 // the TF32 setting it makes for cuBLAS and cuDNN; none: left as it is
  bool scales_loss = false;                 // dynamic loss scaling (GradScaler): steps that overflow are skipped by design
  // --- what it is measured against, and what it needs ---
  std::string matmul_peak;  // the measured peak (hw/peaks.h) MFU divides by: "matmul_fp32", "matmul_bf16", ...
  // Why, on this device, it runs slower or other than its name says ("" when it runs as meant): the plan's reason
  // beside "requested".
  std::function<std::string(const DeviceFacts&)> caveat;
  // precision: auto picks, among the entries whose auto_reason gives a reason on the device, the one with the highest
  // auto_preference (0: never), and gives that reason.
  int auto_preference = 0;
  std::function<std::optional<std::string>(const DeviceFacts&)> auto_reason;
  // Whether the autotuner (`bellows plan` with plan.allow: [precision]) tries it on the device.
  std::function<bool(const DeviceFacts&)> worth_trying;
  // Builds the policy; empty: the standard one, driven by the fields above (autocast guard, TF32 flags, GradScaler).
  std::function<std::unique_ptr<Precision>(const PrecisionEntry&, c10::Device, const GradScalerOptions&)> make;

  bool mixed() const { return autocast.has_value(); }  // computes the forward in a reduced dtype
};

// Every registered policy, in `order`; their names (fp32, tf32, bf16-mixed, fp16-mixed).
std::vector<PrecisionEntry> precision_entries();
std::vector<std::string> precision_names();
// kConfig error naming the unknown policy and the closest registered name ("auto" is the plan's to resolve first).
const PrecisionEntry& find_precision(const std::string& name);
// What `precision: auto` picks on the device, and why.
struct AutoPrecision {
  const PrecisionEntry* entry = nullptr;
  std::string reason;
};
AutoPrecision auto_precision(const DeviceFacts& device);

// Registration, one static object per policy (in its own file):
//   const bellows::precision::PrecisionRegistrar kMinePolicyRegistered(mine_policy());
void register_precision(PrecisionEntry entry);  // kInternal error on a duplicate name
struct PrecisionRegistrar {
  explicit PrecisionRegistrar(PrecisionEntry entry) { register_precision(std::move(entry)); }
};

}  // namespace bellows::precision
