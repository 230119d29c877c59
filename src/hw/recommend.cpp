// Turns hardware facts into recommended settings, each with its reason. Pure: reads HardwareInfo only,
// so tests drive it with made-up machines (a GPU-less CPU, an A100, a V100, ...).
#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "bellows/hw/hardware_info.h"
#include "bellows/hw/recommendation.h"

namespace bellows::hw {
namespace {

double gib(std::int64_t bytes) { return static_cast<double>(bytes) / (1LL << 30); }

// Physical cores this process can use: affinity and cgroup quota can be narrower than the machine.
int usable_cores(const CpuInfo& cpu) {
  double cores = std::max(cpu.physical_cores, 1);
  if (cpu.logical_cores > 0 && cpu.usable_cpus > 0 && cpu.usable_cpus < cpu.logical_cores) {
    cores = cores * cpu.usable_cpus / cpu.logical_cores;
  }
  if (cpu.cgroup_cpu_limit) cores = std::min(cores, std::ceil(*cpu.cgroup_cpu_limit));
  return std::max(1, static_cast<int>(cores));
}

std::string gpu_label(const GpuInfo& gpu) {
  return fmt::format("GPU {} ({}, compute capability {}.{})", gpu.index, gpu.name, gpu.cc_major, gpu.cc_minor);
}

std::string cpu_bf16_units(const IsaFeatures& isa) {
  if (isa.amx_bf16 && isa.avx512_bf16) return "AMX-BF16 and AVX512_BF16";
  return isa.amx_bf16 ? "AMX-BF16" : "AVX512_BF16";
}

void recommend_gpu(const CudaInfo& cuda, const GpuInfo& gpu, int cores, std::vector<Recommendation>& out) {
  const std::string who = gpu_label(gpu);
  out.push_back({"device", "cuda", fmt::format("{} usable CUDA device(s); {} has {:.1f} GiB", cuda.gpus.size(), who, gib(gpu.total_memory_bytes))});
  out.push_back(recommend_precision(gpu));
  out.push_back({"tf32", gpu.tf32 ? "true" : "false",
                 gpu.tf32 ? who + " runs fp32 matmuls and convolutions on TF32 tensor cores (10-bit mantissa, fp32 range)"
                          : who + " has no TF32 (needs sm_80)"});
  out.push_back({"cudnn_benchmark", "true", "with fixed input shapes cuDNN times its convolution algorithms once and keeps the fastest; set false for varying shapes"});
  out.push_back({"data.pin_memory", "true", "pinned host buffers let host-to-device copies run asynchronously (non_blocking) beside compute"});
  const int workers = std::clamp(cores - 1, 1, 8);
  out.push_back({"data.workers", std::to_string(workers), fmt::format("{} usable core(s): keep one for the training thread that launches GPU work, the rest decode and collate (at most 8)", cores)});
  out.push_back({"threads.intra_op", std::to_string(std::max(1, cores - workers)), "CPU-side ops are few when the model runs on the GPU; the cores go to the data workers"});
  out.push_back({"memory.gpu_budget_gib", fmt::format("{:.1f}", 0.9 * gib(gpu.free_memory_bytes)),
                 fmt::format("{} has {:.1f} GiB {}; 10% headroom for the CUDA context, cuDNN workspaces and fragmentation", who,
                             gib(gpu.free_memory_bytes), gpu.free_memory_known ? "free" : "in all (its free memory was not asked: another process's GPU)")});
}

void recommend_cpu(const CpuInfo& cpu, int cores, std::vector<Recommendation>& out) {
  out.push_back(recommend_precision(cpu));
  const int workers = cores <= 4 ? 1 : cores / 4;
  out.push_back({"threads.intra_op", std::to_string(cores),
                 fmt::format("one compute thread per usable physical core ({} of {} logical CPUs usable); hyper-threads share the vector units", cores, cpu.logical_cores)});
  out.push_back({"data.workers", std::to_string(workers),
                 fmt::format("data workers share the {} core(s) with compute: {} overlaps loading with compute; measure with `bellows bench data`", cores, workers)});
  out.push_back({"data.pin_memory", "false", "the model runs on the CPU, so no host-to-device copy needs pinned memory"});
}

}  // namespace

precision::DeviceFacts device_facts(const CpuInfo& cpu) {
  precision::DeviceFacts d;
  d.who = "CPU";
  const IsaFeatures usable = kernel_isa(cpu);  // what oneDNN may use in this process
  d.bf16 = usable.avx512_bf16 || usable.amx_bf16;
  if (d.bf16) {
    d.bf16_units = cpu_bf16_units(usable);
  } else if (cpu.isa.avx512_bf16 || cpu.isa.amx_bf16) {
    d.no_bf16_why = fmt::format("CPU has {}, but {}={} keeps oneDNN's matmuls and convolutions off it", cpu_bf16_units(cpu.isa),
                                cpu.onednn_cap->variable, cpu.onednn_cap->value);
  }
  d.fp16 = usable.avx512_fp16;
  return d;
}

precision::DeviceFacts device_facts(const GpuInfo& gpu) {
  precision::DeviceFacts d;
  d.cuda = true;
  d.who = gpu_label(gpu);
  d.bf16 = gpu.bf16;
  d.fp16 = gpu.fp16_tensor_cores;
  d.tf32 = gpu.tf32;
  return d;
}

Recommendation recommend_precision(const GpuInfo& gpu) {
  const precision::AutoPrecision pick = precision::auto_precision(device_facts(gpu));
  return {"precision", pick.entry->name, pick.reason};
}

Recommendation recommend_precision(const CpuInfo& cpu) {
  const precision::AutoPrecision pick = precision::auto_precision(device_facts(cpu));
  return {"precision", pick.entry->name, pick.reason};
}

std::vector<Recommendation> recommend(const HardwareInfo& info) {
  std::vector<Recommendation> out;
  const int cores = usable_cores(info.cpu);
  if (const GpuInfo* gpu = first_supported_gpu(info.cuda)) {
    recommend_gpu(info.cuda, *gpu, cores, out);
  } else {
    std::string why = info.cuda.reason;
    if (info.cuda.usable && !info.cuda.gpus.empty()) {
      const auto& g = info.cuda.gpus.front();
      std::string archs;
      for (const auto& a : info.torch.cuda_arch_list) archs += (archs.empty() ? "" : ", ") + a;
      why = fmt::format("GPU {} ({}, compute capability {}.{}) is not among LibTorch's compiled architectures ({}); bellows runs on the CPU",
                        g.index, g.name, g.cc_major, g.cc_minor, archs);
    }
    out.push_back({"device", "cpu", why.empty() ? "no usable CUDA device" : why});
    recommend_cpu(info.cpu, cores, out);
  }
  out.push_back({"threads.inter_op", "1", "a training step runs its ops one after another; inter-op threads serve only independent graph branches"});
  std::int64_t host = info.memory.available_bytes;
  if (info.memory.cgroup_limit_bytes) host = std::min(host, *info.memory.cgroup_limit_bytes);
  out.push_back({"memory.host_budget_gib", fmt::format("{:.1f}", 0.8 * gib(host)),
                 fmt::format("{:.1f} GiB available{}; 20% headroom for the OS, page cache and prefetch queues", gib(host),
                             info.memory.cgroup_limit_bytes ? " (cgroup limit applied)" : "")});
  if (info.cpu.numa_nodes > 1) {
    out.push_back({"numa", "bind", fmt::format("{} NUMA nodes: run one process per node (numactl --cpunodebind=N --membind=N) so memory stays local", info.cpu.numa_nodes)});
  }
  return out;
}

}  // namespace bellows::hw
