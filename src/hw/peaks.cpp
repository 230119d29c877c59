// Measures the ceilings that MFU and bandwidth figures divide by, through LibTorch itself: dense matmul
// throughput per precision and memory-copy bandwidth, on the CPU and on each usable GPU.
#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <ATen/Context.h>
#include <ATen/Parallel.h>
#include <ATen/detail/CUDAHooksInterface.h>
#include <fmt/format.h>

#include <chrono>
#include <cmath>
#include <fstream>
#include <functional>

#include <nlohmann/json.hpp>

#include "bellows/hw/hardware_info.h"
#include "bellows/hw/peaks.h"
#include "bellows/util/atomic_file.h"
#include "bellows/util/cache.h"
#include "bellows/util/check.h"
#include "bellows/util/timer.h"  // defines: seconds_since

namespace bellows::hw {
namespace {

using Clock = std::chrono::steady_clock;

struct Timing {
  double seconds_per_op = 0;
  std::int64_t ops = 0;
};

// Best (smallest) time per op over `trials` windows of at least min_seconds/trials each, after a warm-up.
Timing best_time(const std::function<void()>& op, const std::function<void()>& sync, const MeasureOptions& opt) {
  op();
  sync();
  Timing best{1e30, 0};
  const double window = opt.min_seconds / std::max(opt.trials, 1);
  for (int t = 0; t < std::max(opt.trials, 1); ++t) {
    std::int64_t n = 0;
    const auto start = Clock::now();
    double elapsed = 0;
    do {
      op();
      ++n;
      sync();
      elapsed = seconds_since(start);
    } while (elapsed < window);
    if (elapsed / n < best.seconds_per_op) best = {elapsed / n, n};
    best.ops = std::max(best.ops, n);
  }
  return best;
}

// Random n x n operands from a generator of the measurement's own, made on the CPU in float32 and moved to the
// device and dtype: the global generator, which runs seed, is left alone, so a run that measures its machine's peaks
// first draws the same dropout masks and noise as one that reads them from the cache.
at::Tensor operand(std::int64_t n, const at::TensorOptions& options, at::Generator& gen) {
  return at::randn({n, n}, gen, at::TensorOptions().dtype(at::kFloat)).to(options);
}

std::string dtype_name(at::ScalarType t) {
  switch (t) {
    case at::kFloat: return "fp32";
    case at::kBFloat16: return "bf16";
    case at::kHalf: return "fp16";
    default: return std::string(c10::toString(t));
  }
}

// The largest n (doubling from kSmallestMatmul up to matmul_size) whose product, predicted from one timed product
// at the size before (time ~ n^3 at that size's rate, which only rises with n), lets a warm-up and `trials`
// windows fit in min_seconds.
constexpr std::int64_t kSmallestMatmul = 128;
std::int64_t matmul_size_within_budget(const at::TensorOptions& options, const std::function<void()>& sync, const MeasureOptions& opt) {
  const double per_op_budget = opt.min_seconds / (opt.trials + 1);
  at::Generator gen = at::detail::createCPUGenerator(/*seed_in=*/0);
  std::int64_t n = std::min(opt.matmul_size, kSmallestMatmul);
  bool first = true;
  while (n < opt.matmul_size) {
    at::Tensor a = operand(n, options, gen), b = operand(n, options, gen), c = at::empty({n, n}, options);
    if (first) {
      at::mm_out(c, a, b);  // library set-up
      sync();
      first = false;
    }
    const auto start = Clock::now();
    at::mm_out(c, a, b);
    sync();
    const std::int64_t next = std::min(2 * n, opt.matmul_size);
    if (std::max(seconds_since(start), 1e-9) * std::pow(static_cast<double>(next) / n, 3) > per_op_budget) break;
    n = next;
  }
  return n;
}

PeakMeasurement measure_matmul(const at::Device& device, at::ScalarType dtype, const std::function<void()>& sync,
                               const MeasureOptions& opt, const std::string& name_suffix, const std::string& note) {
  const auto options = at::TensorOptions().device(device).dtype(dtype);
  const std::int64_t n = matmul_size_within_budget(options, sync, opt);
  at::Generator gen = at::detail::createCPUGenerator(/*seed_in=*/1);
  at::Tensor a = operand(n, options, gen), b = operand(n, options, gen), c = at::empty({n, n}, options);
  const Timing t = best_time([&] { at::mm_out(c, a, b); }, sync, opt);
  const double flops = 2.0 * static_cast<double>(n) * n * n;
  PeakMeasurement m;
  m.name = "matmul_" + dtype_name(dtype) + name_suffix;
  m.device = device.str();
  m.value = flops / t.seconds_per_op / 1e9;
  m.unit = "GFLOP/s";
  m.method = fmt::format("at::mm_out on {}x{} {} matrices ({:.1f} GFLOP each){}{}, best of {} windows of >= {:.2f} s after a warm-up",
                         n, n, dtype_name(dtype), flops / 1e9, note,
                         n < opt.matmul_size ? fmt::format(" (not {}: it would not fit the time budget)", opt.matmul_size) : "",
                         opt.trials, opt.min_seconds / opt.trials);
  return m;
}

PeakMeasurement unsupported(const std::string& name, const at::Device& device, const std::string& unit, const std::string& why) {
  PeakMeasurement m;
  m.name = name;
  m.device = device.str();
  m.unit = unit;
  m.supported = false;
  m.method = "no hardware support: " + why + "; not timed";
  return m;
}

PeakMeasurement measure_copy(const at::Device& device, const std::function<void()>& sync, const MeasureOptions& opt) {
  const std::int64_t elements = opt.copy_bytes / 4;
  const auto options = at::TensorOptions().device(device).dtype(at::kFloat);
  at::Tensor src = at::ones({elements}, options), dst = at::empty({elements}, options);
  const Timing t = best_time([&] { dst.copy_(src); }, sync, opt);
  PeakMeasurement m;
  m.name = "memory_copy";
  m.device = device.str();
  m.value = 2.0 * static_cast<double>(opt.copy_bytes) / t.seconds_per_op / 1e9;
  m.unit = "GB/s";
  m.method = fmt::format("Tensor::copy_ between two {} MiB fp32 buffers, counting bytes read + written (2 x {} MiB per copy), best of {} windows",
                         opt.copy_bytes >> 20, opt.copy_bytes >> 20, opt.trials);
  return m;
}

}  // namespace

std::vector<PeakMeasurement> measure_peaks(const HardwareInfo& info, const MeasureOptions& opt) {
  BELLOWS_CHECK_USAGE(opt.matmul_size > 0 && opt.copy_bytes >= 4 && opt.min_seconds > 0 && opt.trials > 0,
                      fmt::format("invalid measurement options (matmul_size={}, copy_bytes={}, min_seconds={}, trials={})",
                                  opt.matmul_size, opt.copy_bytes, opt.min_seconds, opt.trials),
                      "use positive sizes, time and trial count");
  std::vector<PeakMeasurement> peaks;
  const auto no_sync = [] {};
  const std::string threads = fmt::format(", {} intra-op thread(s)", at::get_num_threads());
  const at::Device cpu(at::kCPU);
  peaks.push_back(measure_matmul(cpu, at::kFloat, no_sync, opt, "", threads));
  const precision::DeviceFacts facts = device_facts(info.cpu);  // the CPU's bf16 units as oneDNN may use them here
  if (facts.bf16) {
    peaks.push_back(measure_matmul(cpu, at::kBFloat16, no_sync, opt, "", threads));
  } else {
    peaks.push_back(unsupported("matmul_bf16", cpu, "GFLOP/s",
                                facts.no_bf16_why + ", so bf16 products run on a software path (about 100x slower than fp32 "
                                "here), which is no ceiling"));
  }
  peaks.push_back(measure_copy(cpu, no_sync, opt));

  if (!info.cuda.usable) return peaks;
  for (const auto& gpu : info.cuda.gpus) {
    if (!gpu.arch_supported) continue;
    const auto index = static_cast<c10::DeviceIndex>(gpu.index);
    const at::Device device(at::kCUDA, index);
    const auto sync = [index] { at::detail::getCUDAHooks().deviceSynchronize(index); };
    auto& ctx = at::globalContext();
    const bool tf32_before = ctx.allowTF32CuBLAS();
    ctx.setAllowTF32CuBLAS(false);
    peaks.push_back(measure_matmul(device, at::kFloat, sync, opt, "", ", TF32 off"));
    if (gpu.tf32) {
      ctx.setAllowTF32CuBLAS(true);
      peaks.push_back(measure_matmul(device, at::kFloat, sync, opt, "_tf32", ", TF32 on"));
    }
    ctx.setAllowTF32CuBLAS(tf32_before);
    if (gpu.bf16) peaks.push_back(measure_matmul(device, at::kBFloat16, sync, opt, "", ""));
    if (gpu.fp16_tensor_cores) peaks.push_back(measure_matmul(device, at::kHalf, sync, opt, "", ""));
    peaks.push_back(measure_copy(device, sync, opt));
  }
  return peaks;
}

namespace {

std::filesystem::path peaks_cache_file(const HardwareInfo& info) {
  std::uint64_t key = fnv1a(info.cpu.model_name);
  key = fnv1a(std::to_string(info.cpu.usable_cpus), key);
  key = fnv1a(std::to_string(at::get_num_threads()), key);
  key = fnv1a(info.torch.version, key);
  for (const auto& g : info.cuda.gpus) key = fnv1a(g.name + "/" + std::to_string(g.index), key);
  // A oneDNN ISA cap changes what the matmuls run on (and bf16's row); uncapped, the key is as before it was counted.
  if (const auto& cap = info.cpu.onednn_cap) key = fnv1a(cap->variable + "=" + cap->value, key);
  // "-std": the standard measurement's file (its options recorded inside), apart from the files of bellows before it,
  // which another bellows on the machine may still read and write.
  return user_cache_dir() / fmt::format("peaks-std-{:016x}.json", key);
}

}  // namespace

namespace {

nlohmann::json protocol_json(const MeasureOptions& o) {
  return {{"matmul_size", o.matmul_size}, {"copy_bytes", o.copy_bytes}, {"min_seconds", o.min_seconds}, {"trials", o.trials}};
}

}  // namespace

bool is_standard(const MeasureOptions& o) { return protocol_json(o) == protocol_json(MeasureOptions{}); }

bool store_peaks(const HardwareInfo& info, const std::vector<PeakMeasurement>& peaks, const MeasureOptions& options) {
  if (!is_standard(options)) return false;
  nlohmann::json j = nlohmann::json::array();
  for (const auto& p : peaks) {
    j.push_back({{"name", p.name}, {"device", p.device}, {"value", p.value}, {"unit", p.unit}, {"method", p.method},
                 {"supported", p.supported}});
  }
  const std::filesystem::path file = peaks_cache_file(info);
  try {
    std::filesystem::create_directories(file.parent_path());
    write_file_atomically(file, nlohmann::json({{"protocol", protocol_json(options)}, {"peaks", j}}).dump(1) + "\n");
    return true;
  } catch (const std::exception&) {  // a cache that cannot be written: the next run measures again
    return false;
  }
}

CachedPeaks cached_peaks(const HardwareInfo& info, bool measure_if_missing) {
  CachedPeaks c;
  c.file = peaks_cache_file(info);
  try {
    std::ifstream in(c.file);
    if (in) {
      const nlohmann::json j = nlohmann::json::parse(in);
      // Only the standard measurement: a file without its options (an older format) or with others counts as none.
      if (j.is_object() && j.value("protocol", nlohmann::json()) == protocol_json(MeasureOptions{})) {
        for (const auto& e : j.at("peaks")) {
          c.peaks.push_back(PeakMeasurement{e.at("name").get<std::string>(), e.at("device").get<std::string>(), e.at("value").get<double>(),
                                            e.at("unit").get<std::string>(), e.at("method").get<std::string>(),
                                            e.at("supported").get<bool>()});
        }
      }
    }
  } catch (const std::exception&) {  // unreadable or from another version: measured again
    c.peaks.clear();
  }
  if (!c.peaks.empty() || !measure_if_missing) return c;
  const auto start = std::chrono::steady_clock::now();
  const MeasureOptions standard;  // the runs' peaks are measured one way
  c.peaks = measure_peaks(info, standard);
  c.seconds = seconds_since(start);
  c.measured_now = true;
  store_peaks(info, c.peaks, standard);
  return c;
}

std::optional<MatmulPeak> matmul_peak(const std::vector<PeakMeasurement>& peaks, const std::string& name,
                                      const std::string& device) {
  if (name.empty()) return std::nullopt;
  for (const auto& p : peaks) {
    if (p.name == name && p.device == device && p.supported && p.value > 0) return MatmulPeak{p.value * 1e9, name};
  }
  return std::nullopt;
}

}  // namespace bellows::hw
