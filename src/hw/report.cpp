// Renders HardwareInfo (and measured peaks) as text for people and as JSON for machines. The JSON layout is
// documented in docs/hw.md and checked against docs/hw.schema.json by the tests.
#include <fmt/format.h>

#include <nlohmann/json.hpp>

#include "bellows/hw/report.h"

namespace bellows::hw {
namespace {

using nlohmann::json;

std::string bytes_human(std::int64_t bytes) {
  const double b = static_cast<double>(bytes);
  if (bytes >= (1LL << 30)) return fmt::format("{:.1f} GiB", b / (1LL << 30));
  if (bytes >= (1LL << 20)) return fmt::format("{:.0f} MiB", b / (1LL << 20));
  return fmt::format("{:.0f} KiB", b / (1LL << 10));
}

std::string cache_label(const CacheInfo& c) {
  const char* suffix = c.type == "Data" ? "d" : c.type == "Instruction" ? "i" : "";
  return fmt::format("L{}{}", c.level, suffix);
}

std::string join(const std::vector<std::string>& items, const char* sep) {
  std::string out;
  for (const auto& item : items) out += (out.empty() ? "" : sep) + item;
  return out;
}

json optional_json(const auto& value) { return value ? json(*value) : json(nullptr); }

json cap_json(const std::optional<OnednnIsaCap>& cap) {
  if (!cap) return nullptr;
  return {{"variable", cap->variable}, {"value", cap->value}, {"recognised", cap->recognised},
          {"admits_avx512_bf16", cap->avx512_bf16}, {"admits_avx512_fp16", cap->avx512_fp16}, {"admits_amx", cap->amx}};
}

// "ONEDNN_MAX_CPU_ISA=AVX2: keeps oneDNN off avx512_bf16 amx_bf16 of this CPU", for the text report.
std::string cap_text(const CpuInfo& cpu) {
  const OnednnIsaCap& cap = *cpu.onednn_cap;
  const std::string set = cap.variable + "=" + cap.value;
  if (!cap.recognised) return set + ": not an ISA name oneDNN knows, so it sets no cap";
  std::vector<std::string> off;
  const auto all = cpu.isa.list(), usable = kernel_isa(cpu).list();
  for (std::size_t i = 0; i < all.size(); ++i) {
    if (all[i].second && !usable[i].second) off.push_back(all[i].first);
  }
  return set + (off.empty() ? ": admits every bf16, fp16 and AMX unit this CPU has" : ": keeps oneDNN's matmuls and convolutions off " + join(off, " "));
}

json to_json(const HardwareInfo& info, const std::vector<PeakMeasurement>& peaks) {
  const auto& cpu = info.cpu;
  json caches = json::array();
  for (const auto& c : cpu.caches) {
    caches.push_back({{"level", c.level}, {"type", c.type}, {"size_bytes", c.size_bytes},
                      {"shared_by_cpus", c.shared_by_cpus}, {"instances", c.instances}});
  }
  json isa = json::object();
  for (const auto& [name, present] : cpu.isa.list()) isa[name] = present;
  json gpus = json::array();
  for (const auto& g : info.cuda.gpus) {
    gpus.push_back({{"index", g.index}, {"name", g.name}, {"total_memory_bytes", g.total_memory_bytes},
                    {"free_memory_bytes", g.free_memory_bytes}, {"free_memory_known", g.free_memory_known},
                    {"compute_capability", fmt::format("{}.{}", g.cc_major, g.cc_minor)}, {"sm_count", g.sm_count},
                    {"bf16", g.bf16}, {"tf32", g.tf32}, {"fp16_tensor_cores", g.fp16_tensor_cores},
                    {"arch_supported", g.arch_supported}, {"arch_listed", g.arch_listed}});
  }
  json recs = json::array();
  for (const auto& r : info.recommendations) recs.push_back({{"key", r.key}, {"value", r.value}, {"reason", r.reason}});
  json measured = json::array();
  for (const auto& p : peaks) {
    measured.push_back({{"name", p.name}, {"device", p.device}, {"value", p.value}, {"unit", p.unit}, {"method", p.method},
                        {"supported", p.supported}});
  }
  const auto& t = info.torch;
  return {
      {"schema_version", kSchemaVersion},
      {"bellows_version", info.bellows_version},
      {"host", {{"hostname", info.hostname}, {"os", info.os}}},
      {"cpu",
       {{"vendor", cpu.vendor}, {"model_name", cpu.model_name}, {"family", cpu.family}, {"model", cpu.model},
        {"stepping", cpu.stepping}, {"sockets", cpu.sockets}, {"physical_cores", cpu.physical_cores},
        {"logical_cores", cpu.logical_cores}, {"usable_cpus", cpu.usable_cpus},
        {"cgroup_cpu_limit", optional_json(cpu.cgroup_cpu_limit)}, {"numa_nodes", cpu.numa_nodes},
        {"caches", caches}, {"isa", isa}, {"onednn_cap", cap_json(cpu.onednn_cap)}}},
      {"memory",
       {{"total_bytes", info.memory.total_bytes}, {"available_bytes", info.memory.available_bytes},
        {"cgroup_limit_bytes", optional_json(info.memory.cgroup_limit_bytes)}}},
      {"torch",
       {{"version", t.version}, {"cxx11_abi", t.cxx11_abi}, {"cuda_compiled", t.cuda_compiled},
        {"cuda_version", t.cuda_version}, {"cudnn_version", t.cudnn_version}, {"nccl", t.nccl}, {"gloo", t.gloo},
        {"cuda_arch_list", t.cuda_arch_list}, {"compiler", t.compiler}, {"blas", t.blas}, {"lapack", t.lapack},
        {"mkl", t.mkl}, {"onednn", t.onednn}, {"openmp", t.openmp}, {"parallel_backend", t.parallel_backend},
        {"cpu_capability_build", t.cpu_capability_build}, {"cpu_capability_runtime", t.cpu_capability_runtime},
        {"intra_op_threads", t.intra_op_threads}, {"inter_op_threads", t.inter_op_threads}}},
      {"cuda",
       {{"compiled", info.cuda.compiled}, {"usable", info.cuda.usable}, {"reason", info.cuda.reason},
        {"driver_version", info.cuda.driver_version}, {"runtime_version", info.cuda.runtime_version},
        {"cudnn_version", info.cuda.cudnn_version}, {"nccl_version", info.cuda.nccl_version}, {"gpus", gpus}}},
      {"recommendations", recs},
      {"peaks", measured},
  };
}

void row(std::string& out, std::string_view key, std::string_view value) {
  out += fmt::format("  {:<14} {}\n", key, value);
}

}  // namespace

std::string format_json(const HardwareInfo& info, const std::vector<PeakMeasurement>& peaks, int indent) {
  return to_json(info, peaks).dump(indent) + "\n";
}

std::string format_text(const HardwareInfo& info, const std::vector<PeakMeasurement>& peaks) {
  std::string out = fmt::format("bellows {} hardware report\n", info.bellows_version);
  row(out, "host", fmt::format("{} ({})", info.hostname, info.os));

  const auto& cpu = info.cpu;
  out += "\nCPU\n";
  row(out, "model", fmt::format("{} ({}, family {} model {} stepping {})", cpu.model_name, cpu.vendor, cpu.family,
                                cpu.model, cpu.stepping));
  std::string cores = fmt::format("{} physical, {} logical, {} usable by this process; {} socket(s), {} NUMA node(s)",
                                  cpu.physical_cores, cpu.logical_cores, cpu.usable_cpus, cpu.sockets, cpu.numa_nodes);
  if (cpu.cgroup_cpu_limit) cores += fmt::format("; cgroup quota {:.1f} CPUs", *cpu.cgroup_cpu_limit);
  row(out, "cores", cores);
  std::vector<std::string> caches;
  for (const auto& c : cpu.caches) caches.push_back(fmt::format("{} {} x{}", cache_label(c), bytes_human(c.size_bytes), c.instances));
  row(out, "caches", caches.empty() ? "unknown" : join(caches, ", "));
  std::vector<std::string> have, lack;
  for (const auto& [name, present] : cpu.isa.list()) (present ? have : lack).push_back(name);
  row(out, "ISA", have.empty() ? "none of the tracked sets" : join(have, " "));
  if (!lack.empty()) row(out, "ISA missing", join(lack, " "));
  std::string memory = fmt::format("{} total, {} available", bytes_human(info.memory.total_bytes), bytes_human(info.memory.available_bytes));
  if (info.memory.cgroup_limit_bytes) memory += fmt::format(", cgroup limit {}", bytes_human(*info.memory.cgroup_limit_bytes));
  row(out, "memory", memory);

  const auto& t = info.torch;
  out += "\nLibTorch\n";
  row(out, "version", fmt::format("{} ({} ABI, built with {})", t.version, t.cxx11_abi ? "C++11" : "pre-C++11", t.compiler));
  if (t.cuda_compiled) {
    row(out, "CUDA build", fmt::format("CUDA {}, cuDNN {}, NCCL {}, Gloo {}; kernels for sm {}", t.cuda_version, t.cudnn_version,
                                       t.nccl ? "yes" : "no", t.gloo ? "yes" : "no",
                                       t.cuda_arch_list.empty() ? std::string("(not listed in this LibTorch's build configuration)")
                                                                : join(t.cuda_arch_list, " ")));
  } else {
    row(out, "CUDA build", fmt::format("no CUDA; Gloo {}", t.gloo ? "yes" : "no"));
  }
  row(out, "CPU kernels", fmt::format("{} (build supports up to {})", t.cpu_capability_runtime, t.cpu_capability_build));
  row(out, "BLAS", fmt::format("{}; LAPACK {}", t.blas, t.lapack));
  if (!t.onednn.empty()) row(out, "oneDNN", t.onednn);
  if (cpu.onednn_cap) row(out, "oneDNN cap", cap_text(cpu));
  if (!t.openmp.empty()) row(out, "OpenMP", t.openmp);
  row(out, "threads", fmt::format("intra-op {}, inter-op {} ({})", t.intra_op_threads, t.inter_op_threads, t.parallel_backend));

  out += "\nGPU\n";
  const auto& cuda = info.cuda;
  if (cuda.compiled) {
    row(out, "CUDA runtime", fmt::format("{}; driver {}; cuDNN {}; NCCL {}", cuda.runtime_version.empty() ? "?" : cuda.runtime_version,
                                         cuda.driver_version.empty() ? "none" : cuda.driver_version,
                                         cuda.cudnn_version.empty() ? "none" : cuda.cudnn_version,
                                         cuda.nccl_version.empty() ? "none" : cuda.nccl_version));
  }
  if (!cuda.usable) row(out, "not usable", cuda.reason);
  for (const auto& g : cuda.gpus) {
    row(out, fmt::format("cuda:{}", g.index),
        fmt::format("{}, compute capability {}.{}, {} SMs, {} total / {}", g.name, g.cc_major, g.cc_minor, g.sm_count,
                    bytes_human(g.total_memory_bytes),
                    g.free_memory_known ? bytes_human(g.free_memory_bytes) + " free" : "free not asked (another process's GPU)"));
    row(out, "", fmt::format("bf16 {}, TF32 {}, fp16 tensor cores {}, LibTorch kernels {}", g.bf16 ? "yes" : "no",
                             g.tf32 ? "yes" : "no", g.fp16_tensor_cores ? "yes" : "no",
                             !g.arch_listed ? "not listed (assumed)" : g.arch_supported ? "yes" : "NO"));
  }

  if (!peaks.empty()) {
    out += "\nMeasured peaks\n";
    for (const auto& p : peaks) {
      row(out, p.name, p.supported ? fmt::format("{:>10.1f} {:<8} on {}", p.value, p.unit, p.device)
                                   : fmt::format("{:>10} {:<8} on {}", "-", "", p.device));
      row(out, "", "method: " + p.method);
    }
  }

  out += "\nRecommendations\n";
  for (const auto& r : info.recommendations) {
    out += fmt::format("  {:<22} {:<11} {}\n", r.key, r.value, r.reason);
  }
  return out;
}

}  // namespace bellows::hw
