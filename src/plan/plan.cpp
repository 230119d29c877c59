// Resolves a PlanRequest against the hardware report; see plan.h.
#include "bellows/plan/plan.h"

#include "bellows/hw/recommendation.h"  // defines: device_facts
#include "bellows/precision/registry.h"   // defines: find_precision, auto_precision

#include <ATen/Context.h>
#include <ATen/Parallel.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstdlib>
#include <climits>
#include <cstdint>
#if defined(__GLIBC__)
#include <malloc.h>
#endif

#include "bellows/util/check.h"

namespace bellows::plan {
namespace {

const hw::Recommendation* find_rec(const hw::HardwareInfo& hw, const std::string& key) {
  for (const auto& r : hw.recommendations) {
    if (r.key == key) return &r;
  }
  return nullptr;
}

bool parse_tristate(const std::string& key, const std::string& value, bool automatic) {
  if (value == "auto") return automatic;
  if (value == "true") return true;
  if (value == "false") return false;
  BELLOWS_FAIL(ErrorKind::kConfig, fmt::format("{} is '{}', expected auto, true or false", key, value), "fix the value");
}

const hw::GpuInfo* gpu_at(const hw::HardwareInfo& hw, int index) {
  for (const auto& g : hw.cuda.gpus) {
    if (g.index == index) return &g;
  }
  return nullptr;
}

void resolve_device(const PlanRequest& req, const hw::HardwareInfo& hw, Plan& plan) {
  if (req.device == "auto") {
    const auto* rec = find_rec(hw, "device");
    const bool cuda = rec && rec->value == "cuda";
    plan.device = cuda ? c10::Device(c10::kCUDA, 0) : c10::Device(c10::kCPU);
    plan.entries.push_back({"device", plan.device.str(), rec ? rec->reason : "no usable GPU"});
    return;
  }
  if (req.device == "cpu") {
    plan.device = c10::Device(c10::kCPU);
    plan.entries.push_back({"device", "cpu", "requested"});
    return;
  }
  int index = 0;
  if (req.device != "cuda" && std::sscanf(req.device.c_str(), "cuda:%d", &index) != 1) {
    BELLOWS_FAIL(ErrorKind::kConfig, fmt::format("device is '{}', expected auto, cpu, cuda or cuda:N", req.device),
                 "set device to one of those");
  }
  BELLOWS_CHECK_RESOURCE(hw.cuda.usable, fmt::format("device {} requested but CUDA is not usable: {}", req.device, hw.cuda.reason),
                         "run on a machine with a GPU, or set device: cpu (or auto)");
  const hw::GpuInfo* gpu = gpu_at(hw, index);
  BELLOWS_CHECK_RESOURCE(gpu != nullptr, fmt::format("device cuda:{} requested but only {} GPU(s) are visible", index, hw.cuda.gpus.size()),
                         "pick an index below the GPU count, or check CUDA_VISIBLE_DEVICES");
  BELLOWS_CHECK_RESOURCE(gpu->arch_supported,
                         fmt::format("GPU {} ({}, compute capability {}.{}) has no kernels in this LibTorch build", index, gpu->name,
                                     gpu->cc_major, gpu->cc_minor),
                         "use a LibTorch build for this architecture, or device: cpu");
  plan.device = c10::Device(c10::kCUDA, static_cast<c10::DeviceIndex>(index));
  plan.entries.push_back({"device", plan.device.str(), fmt::format("requested; {} with {:.1f} GiB", gpu->name, gpu->total_memory_bytes / double(1LL << 30))});
}

void resolve_precision(const PlanRequest& req, const hw::HardwareInfo& hw, Plan& plan) {
  const std::vector<std::string> names = precision::precision_names();  // the registered policies (precision/registry.h)
  BELLOWS_CHECK_CONFIG(req.precision == "auto" || std::find(names.begin(), names.end(), req.precision) != names.end(),
                       fmt::format("precision is '{}', expected one of auto, {}", req.precision, fmt::join(names, ", ")),
                       "pick one of those");
  const bool cuda = plan.device.is_cuda();
  const hw::GpuInfo* gpu = cuda ? gpu_at(hw, plan.device.index()) : nullptr;
  BELLOWS_CHECK(!cuda || gpu != nullptr, "the planned CUDA device is not in the hardware report", "report this bug");
  const precision::DeviceFacts device = gpu ? hw::device_facts(*gpu) : hw::device_facts(hw.cpu);
  if (req.precision != "auto") {
    plan.precision = req.precision;
    const precision::PrecisionEntry& policy = precision::find_precision(req.precision);
    const std::string caveat = policy.caveat ? policy.caveat(device) : std::string();
    plan.entries.push_back({"precision", plan.precision, caveat.empty() ? "requested" : "requested; " + caveat});
    return;
  }
  const precision::AutoPrecision pick = precision::auto_precision(device);
  plan.precision = pick.entry->name;
  plan.entries.push_back({"precision", plan.precision, pick.reason});
}

// glibc gives freed memory back to the OS (heap trimming; blocks above the mmap threshold are unmapped on free)
// and every next step faults it back in, page by page: ~150 faults per W5 step measured, where the tensors of
// one step are freed and allocated again in the next. Keeping it is what PyTorch's CUDA caching allocator
// does on the GPU; on the CPU two thresholds do it (M_MMAP_THRESHOLD at glibc's largest, 32 MiB, and a trim
// threshold of 1 GiB or a quarter of the RAM, whichever is smaller).
void resolve_allocator(const PlanRequest& req, const hw::HardwareInfo& hw, Plan& plan) {
  BELLOWS_CHECK_CONFIG(req.cpu_allocator == "auto" || req.cpu_allocator == "retain" || req.cpu_allocator == "system",
                       fmt::format("cpu_allocator is '{}'", req.cpu_allocator), "use one of: auto, retain, system");
  if (req.cpu_allocator == "system") {
    plan.entries.push_back({"cpu_allocator", "system", "requested: glibc trims and unmaps freed memory as it chooses"});
    return;
  }
#if defined(__GLIBC__)
  const std::int64_t ram = hw.memory.total_bytes > 0 ? hw.memory.total_bytes : (std::int64_t{4} << 30);
  plan.retain_bytes = std::min<std::int64_t>(std::int64_t{1} << 30, ram / 4);
  plan.entries.push_back({"cpu_allocator", "retain",
                          fmt::format("{}freed tensor memory (up to {:.2f} GiB) is kept for the next step instead of being returned to the "
                                      "OS and faulted back in page by page", req.cpu_allocator == "retain" ? "requested: " : "",
                                      plan.retain_bytes / double(1LL << 30))});
#else
  plan.entries.push_back({"cpu_allocator", "system", "not glibc: its malloc thresholds are not available"});
#endif
}

// One GPU per process of a data-parallel job: cuda:<local rank> where the device names no index.
// A launcher that gives each rank its own CUDA_VISIBLE_DEVICES leaves one GPU in each: that one.
void assign_local_gpu(const PlanRequest& req, const hw::HardwareInfo& hw, Plan& plan) {
  if (!plan.device.is_cuda() || req.local_world_size <= 1 || req.device.find(':') != std::string::npos) return;
  const int index = hw.cuda.gpus.size() == 1 ? 0 : req.local_rank;
  BELLOWS_CHECK_RESOURCE(index < static_cast<int>(hw.cuda.gpus.size()),
                         fmt::format("local rank {} of {} processes on this node, but it has {} usable GPU(s)", req.local_rank,
                                     req.local_world_size, hw.cuda.gpus.size()),
                         "start at most one process per GPU on each node (bellows launch -n <GPUs>)");
  plan.device = c10::Device(c10::kCUDA, static_cast<c10::DeviceIndex>(index));
  for (auto& e : plan.entries) {
    if (e.key == "device") {
      e.value = plan.device.str();
      e.reason += fmt::format("; one GPU per process: local rank {} of {}{}", req.local_rank, req.local_world_size,
                              hw.cuda.gpus.size() == 1 ? " sees one GPU" : "");
    }
  }
}

void resolve_thread_count(const PlanRequest& req, const hw::HardwareInfo& hw, Plan& plan) {
  BELLOWS_CHECK_CONFIG(req.threads >= 0, fmt::format("threads is {}, expected >= 0 (0: auto)", req.threads), "fix threads");
  if (req.threads > 0) {
    plan.threads = static_cast<int>(req.threads);
    plan.entries.push_back({"threads", std::to_string(plan.threads), "requested"});
    return;
  }
  const auto* rec = find_rec(hw, "threads.intra_op");
  plan.threads = rec ? std::max(1, std::stoi(rec->value)) : 1;
  std::string reason = rec ? rec->reason : "default";
  if (req.share_node_cores && req.local_world_size > 1) {
    const int all = plan.threads;
    plan.threads = std::max(1, all / req.local_world_size);
    reason = fmt::format("{}, shared by the {} processes of this node ({} / {})", reason, req.local_world_size, all, req.local_world_size);
  }
  if (req.cores_per_process > 0 && req.cores_per_process < plan.threads) {
    plan.threads = req.cores_per_process;
    reason = fmt::format("{}; the launcher gives this process {} CPU(s)", reason, req.cores_per_process);
  }
  plan.entries.push_back({"threads", std::to_string(plan.threads), reason});
}

// After plan.deterministic: benchmark mode is off by default for deterministic runs.
void resolve_cudnn_benchmark(const PlanRequest& req, Plan& plan) {
  const bool cuda = plan.device.is_cuda();
  plan.cudnn_benchmark = parse_tristate("cudnn_benchmark", req.cudnn_benchmark, cuda && !req.deterministic);
  BELLOWS_CHECK_CONFIG(!(plan.cudnn_benchmark && plan.deterministic), "cudnn_benchmark: true conflicts with deterministic: true",
                       "benchmark mode picks algorithms by timing, which is not reproducible; drop one of them");
  plan.entries.push_back({"cudnn_benchmark", plan.cudnn_benchmark ? "true" : "false",
                          req.cudnn_benchmark != "auto" ? "requested"
                          : !cuda                      ? "cuDNN is not used on the CPU"
                          : req.deterministic          ? "off for deterministic runs"
                                                       : "fixed shapes: cuDNN times its algorithms once and keeps the fastest"});
}

void resolve_determinism(Plan& plan) {
  std::string deterministic_reason = "deterministic algorithms, cuDNN deterministic, seeded RNGs";
  if (plan.deterministic && plan.device.is_cuda()) {
    // cuBLAS reproduces its results only with one of these workspace configurations; ATen checks it at every
    // matrix product of a deterministic run. One the user set is kept when it is one of them.
    const char* set = std::getenv("CUBLAS_WORKSPACE_CONFIG");
    const std::string given = set ? set : "";
    BELLOWS_CHECK_CONFIG(given.empty() || given == ":4096:8" || given == ":16:8",
                         fmt::format("deterministic: true on CUDA, but CUBLAS_WORKSPACE_CONFIG is '{}'", given),
                         "unset CUBLAS_WORKSPACE_CONFIG (bellows sets :4096:8) or set it to :4096:8 or :16:8");
    plan.cublas_workspace_config = given.empty() ? ":4096:8" : given;
    deterministic_reason += fmt::format(", CUBLAS_WORKSPACE_CONFIG={} ({})", plan.cublas_workspace_config, given.empty() ? "set by bellows" : "from the environment");
  }
  plan.entries.push_back({"deterministic", plan.deterministic ? "true" : "false",
                          plan.deterministic ? deterministic_reason : "requested: fastest algorithms allowed"});
}

void resolve_layout_and_pinning(const PlanRequest& req, Plan& plan) {
  plan.channels_last = req.channels_last;
  plan.entries.push_back({"channels_last", plan.channels_last ? "true" : "false", plan.channels_last ? "requested: NHWC for 4-D tensors" : "default"});
  const bool cuda = plan.device.is_cuda();
  plan.pin_memory = parse_tristate("pin_memory", req.pin_memory, cuda);
  plan.entries.push_back({"pin_memory", plan.pin_memory ? "true" : "false",
                          req.pin_memory != "auto" ? "requested"
                          : cuda                   ? "pinned buffers allow asynchronous host-to-device copies"
                                                   : "no device copy on the CPU"});
}

void resolve_worker_count(const PlanRequest& req, const hw::HardwareInfo& hw, Plan& plan) {
  BELLOWS_CHECK_CONFIG(req.workers >= -1, fmt::format("data.workers is {}, expected >= 0 (or -1: auto)", req.workers),
                       "set data.workers to 0 (load in the training thread), a thread count, or -1 (auto)");
  if (req.workers >= 0) {
    plan.workers = static_cast<int>(req.workers);
    plan.entries.push_back({"workers", std::to_string(plan.workers),
                            plan.workers == 0 ? "requested: batches load in the training thread" : "requested"});
    return;
  }
  const auto* rec = find_rec(hw, "data.workers");
  plan.workers = rec ? std::max(0, std::stoi(rec->value)) : 1;
  plan.workers_planned = true;
  plan.entries.push_back({"workers", std::to_string(plan.workers), rec ? rec->reason : "default"});
}

}  // namespace

Plan resolve(const PlanRequest& req, const hw::HardwareInfo& hw) {
  Plan plan;
  BELLOWS_CHECK_CONFIG(req.local_world_size >= 1 && req.local_rank >= 0 && req.local_rank < req.local_world_size,
                       fmt::format("local rank {} of {} processes on this node", req.local_rank, req.local_world_size),
                       "check the launcher's LOCAL_RANK / LOCAL_WORLD_SIZE");
  resolve_device(req, hw, plan);
  assign_local_gpu(req, hw, plan);
  resolve_precision(req, hw, plan);
  resolve_thread_count(req, hw, plan);
  plan.deterministic = req.deterministic;
  resolve_cudnn_benchmark(req, plan);
  resolve_determinism(plan);
  resolve_layout_and_pinning(req, plan);
  resolve_worker_count(req, hw, plan);
  BELLOWS_CHECK_CONFIG(req.on_device == "auto" || req.on_device == "true" || req.on_device == "false",
                       fmt::format("data.on_device is '{}'", req.on_device), "use auto, true or false");
  plan.on_device = req.on_device;
  resolve_allocator(req, hw, plan);
  return plan;
}

PlanEntry plan_data_placement(const Plan& plan, std::int64_t data_bytes, const std::string& unplaceable, std::int64_t budget_bytes) {
  const std::string device = plan.device.str();
  if (plan.on_device == "false") return {"on_device", "false", "requested: batches load through the loader"};
  if (plan.on_device == "true") {
    BELLOWS_CHECK_CONFIG(data_bytes >= 0,
                         fmt::format("data.on_device is true, but {} is read and decoded per sample, not held as tensors", unplaceable),
                         "set data.on_device: auto (or false): images and NetCDF slices load through the prefetching loader");
    return {"on_device", "true", fmt::format("requested: the data ({:.1f} MB) placed on {} once, batches gathered there", data_bytes / 1e6, device)};
  }
  if (!plan.device.is_cuda()) {
    return {"on_device", "false", "the device is the host: the loader reads the data where it lies (auto keeps in-memory data on a GPU when it fits)"};
  }
  if (data_bytes < 0) {
    return {"on_device", "false", fmt::format("{} is read and decoded per sample: the prefetching loader copies each batch", unplaceable)};
  }
  const auto share = static_cast<std::int64_t>(kResidentShare * static_cast<double>(budget_bytes));
  if (data_bytes > share) {
    return {"on_device", "false",
            fmt::format("the data takes {:.1f} MB, more than {:.0f}% of {}'s {:.1f} MB budget: the prefetching loader copies each batch",
                        data_bytes / 1e6, 100 * kResidentShare, device, budget_bytes / 1e6)};
  }
  return {"on_device", "true",
          fmt::format("the data ({:.1f} MB) fits in {:.0f}% of {}'s {:.1f} MB budget: placed there once, batches gathered on the device "
                      "(no per-step collation, copy or stager)", data_bytes / 1e6, 100 * kResidentShare, device, budget_bytes / 1e6)};
}

std::optional<PlanEntry> refine_workers(const Plan& plan, const hw::HardwareInfo& hw, double batch_fetch_ms) {
  if (!plan.workers_planned) return std::nullopt;
  const auto entry = std::find_if(plan.entries.begin(), plan.entries.end(), [](const PlanEntry& e) { return e.key == "workers"; });
  BELLOWS_CHECK(entry != plan.entries.end(), "the plan has no workers entry", "report this bug");
  PlanEntry row = *entry;
  const int cores = std::max(1, hw.cpu.usable_cpus);
  if (plan.workers > 0 && plan.device.is_cpu() && plan.threads >= cores && batch_fetch_ms < kCheapBatchMs) {
    row.value = "0";
    row.reason = fmt::format("a batch takes {:.2f} ms to fetch (measured): cheaper in the training thread than a loader "
                             "thread competing with {} compute thread(s) for {} core(s)", batch_fetch_ms, plan.threads, cores);
    return row;
  }
  row.reason += fmt::format("; a batch takes {:.2f} ms to fetch (measured)", batch_fetch_ms);
  return row;
}

void Plan::revise(const PlanEntry& row) {
  const auto it = std::find_if(entries.begin(), entries.end(), [&](const PlanEntry& e) { return e.key == row.key; });
  if (it == entries.end()) entries.push_back(row);
  else *it = row;
  if (row.key == "workers") workers = std::stoi(row.value);
  if (row.key == "on_device") on_device = row.value;
  if (row.key == "precision") precision = row.value;
}

void Plan::revise(const std::vector<PlanEntry>& rows) {
  for (const auto& row : rows) revise(row);
}

std::int64_t device_free_bytes(const hw::HardwareInfo& hw, const Plan& p) {
  if (!p.device.is_cuda()) return hw.memory.available_bytes;
  for (const auto& g : hw.cuda.gpus) {
    if (g.index == (p.device.has_index() ? p.device.index() : 0)) return g.free_memory_bytes;
  }
  return 0;
}

void apply(const Plan& plan) {
  // Before anything can create a cuBLAS handle (the environment is read then, and by ATen's determinism check).
  if (!plan.cublas_workspace_config.empty()) ::setenv("CUBLAS_WORKSPACE_CONFIG", plan.cublas_workspace_config.c_str(), /*overwrite=*/1);
  at::set_num_threads(plan.threads);
  // This process's GPU becomes its current device before anything allocates on one: what runs on "the current
  // device" (NCCL's communicators, the control collectives, CUDA graphs' pools, cuBLAS handles) then lands here, and
  // no rank creates a context on another rank's GPU. Through c10's device guard registry: no CUDA header here.
  if (plan.device.is_cuda()) c10::impl::getDeviceGuardImpl(c10::kCUDA)->setDevice(plan.device);
  auto& ctx = at::globalContext();
  ctx.setDeterministicAlgorithms(plan.deterministic, /*warn_only=*/false);
  ctx.setDeterministicCuDNN(plan.deterministic);
  ctx.setBenchmarkCuDNN(plan.cudnn_benchmark);
#if defined(__GLIBC__)
  if (plan.retain_bytes > 0) {
    mallopt(M_MMAP_THRESHOLD, 32 << 20);  // glibc's largest accepted value; fixing it also stops the dynamic adjustment
    mallopt(M_TRIM_THRESHOLD, static_cast<int>(std::min<std::int64_t>(plan.retain_bytes, INT32_MAX)));
  }
#endif
}

std::string Plan::to_json(int indent) const {
  nlohmann::json j = nlohmann::json::object();
  j["device"] = device.str();
  j["precision"] = precision;
  j["threads"] = threads;
  j["cudnn_benchmark"] = cudnn_benchmark;
  j["deterministic"] = deterministic;
  if (!cublas_workspace_config.empty()) j["cublas_workspace_config"] = cublas_workspace_config;
  j["channels_last"] = channels_last;
  j["pin_memory"] = pin_memory;
  j["workers"] = workers;
  j["on_device"] = on_device;
  j["retain_bytes"] = retain_bytes;
  nlohmann::json reasons = nlohmann::json::array();
  for (const auto& e : entries) reasons.push_back({{"key", e.key}, {"value", e.value}, {"reason", e.reason}});
  j["entries"] = reasons;
  return j.dump(indent) + "\n";
}

}  // namespace bellows::plan
