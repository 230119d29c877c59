// The plan: every "auto" in the requested settings made concrete for this machine, each with the reason
// ("bf16-mixed: CPU has AVX512_BF16"). Printed at the start of a run, saved as plan.json beside it.
#pragma once

#include <c10/core/Device.h>

#include <optional>
#include <string>
#include <vector>

#include "bellows/hw/hardware_info.h"  // defines: HardwareInfo

namespace bellows::plan {

struct PlanRequest {
  std::string device = "auto";           // auto | cpu | cuda | cuda:N
  std::string precision = "auto";        // auto | fp32 | tf32 | bf16-mixed | fp16-mixed
  std::int64_t threads = 0;              // intra-op threads; 0: auto
  std::string cudnn_benchmark = "auto";  // auto | true | false
  bool deterministic = false;
  bool channels_last = false;
  std::string pin_memory = "auto";       // auto | true | false
  std::int64_t workers = -1;             // data loading threads; -1: auto
  std::string on_device = "auto";        // data.on_device: auto | true | false (plan_data_placement)
  std::string cpu_allocator = "auto";    // auto | retain | system (glibc's trimming left as it is)
  int local_rank = 0;                    // data parallel: this process among the job's processes on this node
  int local_world_size = 1;              // one GPU each (cuda:<local rank>)
  bool share_node_cores = false;         // auto threads: the usable cores split between the node's processes
  int cores_per_process = 0;             // auto threads: at most this many (the launcher's, e.g. SLURM_CPUS_PER_TASK)
};

struct PlanEntry {
  std::string key;
  std::string value;
  std::string reason;
};

struct Plan {
  c10::Device device = c10::Device(c10::kCPU);
  std::string precision = "fp32";
  int threads = 1;
  bool cudnn_benchmark = false;
  bool deterministic = false;
  bool channels_last = false;
  bool pin_memory = false;
  int workers = 0;                 // data loading threads (0: in the training thread)
  bool workers_planned = false;    // workers came from the hardware (data.workers: -1); refine_workers may revise it
  // The data kept on the device (data/resident.h): "true" or "false", or "auto" until plan_data_placement decides
  // it from the data's bytes (a revised "on_device" row sets it).
  std::string on_device = "auto";
  std::int64_t retain_bytes = 0;   // > 0: freed heap memory up to this much is kept for reuse (cpu_allocator)
  // Deterministic CUDA runs: the CUBLAS_WORKSPACE_CONFIG that apply() sets (cuBLAS is reproducible only with a
  // fixed workspace configuration, and ATen's first matrix product throws without one); "" otherwise.
  std::string cublas_workspace_config;
  std::vector<PlanEntry> entries;  // one per setting, in the order above

  std::string to_json(int indent = 2) const;
  // A row decided later (by the data, the model): it replaces the row of its key, or is added; a revised "workers",
  // "on_device" or "precision" row sets that field too.
  void revise(const PlanEntry& row);
  void revise(const std::vector<PlanEntry>& rows);
};

// kConfig errors for malformed values; kResource when a requested device is not usable (with the reason).
Plan resolve(const PlanRequest& request, const hw::HardwareInfo& hw);

// Applies the process-wide settings: intra-op threads, deterministic algorithms, cuDNN flags, CUBLAS_WORKSPACE_CONFIG
// (deterministic CUDA runs; before the first cuBLAS call, which is why it is here), and glibc's malloc thresholds
// (cpu_allocator: retain).
void apply(const Plan& plan);

// The free memory of the plan's device when the hardware was detected: its GPU's, or on the CPU the host's available
// memory (the memory decisions' budget where memory_budget_gib is 0).
std::int64_t device_free_bytes(const hw::HardwareInfo& hw, const Plan& plan);

// data.on_device decided once the data is read (data/resident.h): whether its tensors are placed on the training
// device once and every batch gathered there (no per-step collation, pinning, copy or stager), from `data_bytes`,
// what placing the training and validation data takes (-1: a dataset is read per sample, named by `unplaceable`),
// against `budget_bytes` (the device's free memory, or memory_budget_gib). auto: on a GPU when the data takes at most
// kResidentShare of the budget; on the CPU never: the device is the host, where the loader reads the same memory
// (and may overlap it with workers). true for data read per sample is a kConfig error naming it. The "on_device"
// row, for Plan::revise.
inline constexpr double kResidentShare = 0.25;
PlanEntry plan_data_placement(const Plan& plan, std::int64_t data_bytes, const std::string& unplaceable, std::int64_t budget_bytes);

// Planned workers revisited once the data is known, from the measured cost of fetching one batch in the
// training thread: on a CPU run whose compute threads take every usable core, a loader thread competes with
// them (on 2 cores: ~120 context switches per W5 step, 40% of its time, measured), so batches that take less
// than kCheapBatchMs to fetch load in the training thread. Requested worker counts are left alone. The
// "workers" row it returns (for Plan::revise) says which and why, with the measured cost; std::nullopt when the workers
// were not planned.
inline constexpr double kCheapBatchMs = 1.0;
std::optional<PlanEntry> refine_workers(const Plan& plan, const hw::HardwareInfo& hw, double batch_fetch_ms);

}  // namespace bellows::plan
