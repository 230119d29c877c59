// `bellows selftest` (app/selftest.h): the checks that run on any device are here, written once over ATen; the
// CUDA-only ones (streams, events, graphs, NCCL) are in cuda/selftest_cuda.cpp.
#include "bellows/lab/selftest.h"

#include <ATen/ATen.h>
#include <ATen/Context.h>
#include <ATen/SDPBackend.h>
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <torch/csrc/distributed/c10d/HashStore.hpp>

#include <chrono>
#include <functional>
#include <thread>

#include "lab/internal/selftest_cuda.h"
#include "bellows/lab/tune.h"  // defines: machine_line
#include "bellows/data/stager.h"
#include "bellows/hw/gpu_info.h"
#include "bellows/hw/hardware_info.h"
#include "bellows/hw/torch_build.h"
#include "bellows/obs/memory.h"
#include "bellows/precision/autocast.h"
#include "bellows/precision/grad_scaler.h"
#include "bellows/train/optimizer.h"
#include "bellows/util/check.h"
#include "bellows/util/cuda_units.h"
#include "bellows/util/exception_report.h"
#include "bellows/util/timer.h"
#include "dist/backend.h"

namespace bellows::lab {
namespace selftest_impl {

using internal::SelftestFailure;
using internal::SelftestSkip;

double max_diff(const at::Tensor& a, const at::Tensor& b) {
  return (a.to(at::kDouble) - b.to(at::kDouble)).abs().max().item<double>();
}

void require(bool ok, const std::string& what) {
  if (!ok) throw SelftestFailure(what);
}

const char* dtype_name(c10::ScalarType t) { return c10::toString(t); }

std::string build_check(c10::Device) {
  const hw::TorchBuildInfo torch = hw::probe_torch_build();
  const std::vector<std::string> units = util::cuda_units();
  if (!torch.cuda_compiled) {
    return fmt::format("LibTorch {} without CUDA: a CPU-only bellows{}", torch.version, units.empty() ? "" : " (yet CUDA units registered)");
  }
  if (units.empty()) {
    throw SelftestFailure(fmt::format("LibTorch {} has CUDA {}, but bellows was built without its CUDA paths (BELLOWS_WITH_CUDA=OFF, or "
                                      "the toolkit was not found at configure time)", torch.version, torch.cuda_version));
  }
  require(units == util::cuda_build_units(), fmt::format("CUDA units compiled in: {}; expected {}", fmt::join(units, ", "),
                                                         fmt::join(util::cuda_build_units(), ", ")));
  return fmt::format("LibTorch {} with CUDA {}; CUDA units compiled in: {}", torch.version, torch.cuda_version, fmt::join(units, ", "));
}

// Autocast: a matrix product runs in `dtype`, a loss in fp32 (autocast's fp32 list), outside the scope fp32 again,
// and the fp32 weight's gradient stays fp32.
std::string autocast_check(c10::Device device, c10::ScalarType dtype) {
  const auto options = at::TensorOptions().device(device).dtype(at::kFloat);
  at::Tensor x = at::randn({64, 64}, options);
  at::Tensor w = at::randn({64, 64}, options).requires_grad_(true);
  at::Tensor target = at::randn({64, 64}, options);
  at::Tensor product, loss;
  {
    std::unique_ptr<precision::AutocastGuard> guard;
    try {
      guard = std::make_unique<precision::AutocastGuard>(device.type(), dtype);
    } catch (const Error& e) {
      throw SelftestSkip(e.message());
    }
    product = at::mm(x, w);
    loss = at::mse_loss(product, target);
  }
  const at::Tensor outside = at::mm(x, w.detach());
  loss.backward();
  require(product.scalar_type() == dtype, fmt::format("mm under autocast gave {}, expected {}", dtype_name(product.scalar_type()), dtype_name(dtype)));
  require(loss.scalar_type() == at::kFloat, fmt::format("mse_loss under autocast gave {}, expected Float (autocast's fp32 list)",
                                                        dtype_name(loss.scalar_type())));
  require(outside.scalar_type() == at::kFloat, fmt::format("mm after the autocast scope gave {}", dtype_name(outside.scalar_type())));
  require(w.grad().scalar_type() == at::kFloat, fmt::format("the fp32 weight's gradient is {}", dtype_name(w.grad().scalar_type())));
  const double err = max_diff(product, outside) / outside.abs().max().item<double>();  // against the fp32 product
  const double tolerance = dtype == at::kBFloat16 ? 2e-2 : 2e-3;
  require(err < tolerance, fmt::format("mm under autocast differs from fp32 by {:.2g} of its largest value (over {:.0e})", err, tolerance));
  return fmt::format("mm -> {}, mse_loss -> Float, outside -> Float, weight grad Float; relative error {:.1e} vs fp32", dtype_name(dtype), err);
}

// The loss scaler: an inf in a gradient skips the step (the weight stays) and halves the scale; a clean step then
// updates the weight.
std::string scaler_check(c10::Device device) {
  precision::GradScalerOptions o;
  o.init_scale = 1024;
  o.growth_interval = 1000;
  precision::GradScaler scaler(o);
  at::Tensor w = at::ones({8}, at::TensorOptions().device(device)).requires_grad_(true);
  const at::Tensor before = w.detach().clone();
  scaler.scale((w * 2).sum()).backward();
  w.mutable_grad().index_put_({3}, std::numeric_limits<float>::infinity());  // the injected inf
  const auto sgd = [&] {
    at::NoGradGuard no_grad;
    w.sub_(w.grad() * 0.1);
  };
  const bool stepped_on_inf = scaler.step({w}, sgd);
  scaler.update();
  const double scale_after_inf = scaler.get_scale();
  require(!stepped_on_inf && at::equal(w.detach(), before), "the step with an inf gradient was not skipped");
  require(scale_after_inf == 512, fmt::format("the scale after an inf is {}, expected 1024 x 0.5 = 512", scale_after_inf));
  w.mutable_grad() = at::Tensor();
  scaler.scale((w * 2).sum()).backward();
  const bool stepped_clean = scaler.step({w}, sgd);
  scaler.update();
  const double moved = (before - w.detach()).to(at::kDouble).mean().item<double>();
  require(stepped_clean && std::abs(moved - 0.2) < 1e-6, fmt::format("the clean step moved the weight by {} (expected 0.1 x grad 2 = 0.2)", moved));
  return fmt::format("inf injected: step skipped, weight unchanged, scale 1024 -> {:.0f}; then a clean step: unscaled grad 2, weight -0.2",
                     scale_after_inf);
}

// A fused optimizer against the foreach reference (the step tested against PyTorch's in tests/golden): three
// steps from the same weights and gradients.
std::string optimizer_check(c10::Device device, const std::string& type) {
  const auto options = at::TensorOptions().device(device);
  at::manual_seed(0);
  const std::vector<at::Tensor> init = {at::randn({256, 128}, options), at::randn({128}, options)};
  std::vector<at::Tensor> grads;
  for (int s = 0; s < 3; ++s) {
    for (const auto& p : init) grads.push_back(at::randn_like(p));
  }
  const auto run = [&](const std::string& implementation) {
    train::NamedParameters named = {{"layer.weight", init[0].clone().requires_grad_(true)}, {"layer.bias", init[1].clone().requires_grad_(true)}};
    train::OptimizerOptions o;
    o.type = type;
    o.lr = 1e-2;
    o.momentum = 0.9;  // SGD's; the Adams have none
    o.implementation = implementation;
    train::Optimizer opt(named, o);
    for (int s = 0; s < 3; ++s) {
      for (std::size_t i = 0; i < named.size(); ++i) named[i].second.mutable_grad() = grads[static_cast<std::size_t>(s) * 2 + i].clone();
      opt.step();
    }
    return std::vector<at::Tensor>{named[0].second.detach(), named[1].second.detach()};
  };
  const std::vector<at::Tensor> fused = run("fused");
  const std::vector<at::Tensor> reference = run("foreach");
  const double diff = std::max(max_diff(fused[0], reference[0]), max_diff(fused[1], reference[1]));
  const double moved = max_diff(fused[0], init[0]);
  require(moved > 1e-3, "the fused step did not move the weights");
  require(diff <= 1e-5, fmt::format("fused vs foreach after 3 steps: max |difference| {:.2e} (over 1e-5)", diff));
  return fmt::format("3 steps, 32,896 parameters: max |fused - foreach| {:.1e} (weights moved up to {:.2g})", diff, moved);
}

// The stager (data/stager.h) against a plain synchronous copy: the same values on the device.
std::string stager_check(c10::Device device) {
  const auto stager = data::make_stager(device, /*pin_memory=*/device.is_cuda());
  std::string mismatches;
  for (int i = 0; i < 4; ++i) {
    data::Batch batch;
    batch.tensors["inputs"] = at::randn({32, 3, 16, 16});
    batch.tensors["targets"] = at::randint(0, 10, {32}, at::kLong);
    batch.size = 32;
    const data::Batch expected = batch.to(device);
    stager->prepare_host(batch);
    stager->begin(batch);
    const data::Batch staged = stager->finish();
    require(staged.at("inputs").device() == device, fmt::format("a staged batch is on {}", staged.at("inputs").device().str()));
    if (!at::equal(staged.at("inputs"), expected.at("inputs")) || !at::equal(staged.at("targets"), expected.at("targets"))) {
      mismatches += fmt::format(" {}", i);
    }
  }
  require(mismatches.empty(), "staged batches differ from the synchronous copy:" + mismatches);
  return fmt::format("4 batches of [32, 3, 16, 16] + labels: equal to Batch::to({}){}", device.str(),
                     stager->pins_memory() ? " (pinned memory, side stream)" : " (the CPU twin)");
}

// Memory statistics against allocations made: a 32 MiB tensor shows in the current and peak bytes, and leaves.
std::string memory_check(c10::Device device) {
  if (device.is_cpu()) obs::install_cpu_tracking();
  const obs::MemoryStats before = obs::memory_stats(device);
  if (!before.tracked) throw SelftestSkip("no memory statistics for this device (the counting CPU allocator could not be installed)");
  constexpr std::int64_t kBytes = 32 << 20;
  obs::reset_peak(device);
  std::int64_t held = 0, peak = 0;
  {
    const at::Tensor t = at::empty({kBytes / 4}, at::TensorOptions().device(device).dtype(at::kFloat));
    const obs::MemoryStats during = obs::memory_stats(device);
    held = during.current_bytes - before.current_bytes;
    peak = during.peak_bytes;
  }
  const std::int64_t left = obs::memory_stats(device).current_bytes - before.current_bytes;
  constexpr std::int64_t kSlack = 1 << 20;  // another thread's small tensors, the allocator's rounding
  require(held >= kBytes && held <= kBytes + kSlack, fmt::format("32 MiB allocated, current bytes grew by {:.2f} MiB", held / 1048576.0));
  require(peak >= before.current_bytes + kBytes, fmt::format("the peak ({:.2f} MiB) is below what was held", peak / 1048576.0));
  require(left <= kSlack, fmt::format("after freeing, {:.2f} MiB more than before are counted", left / 1048576.0));
  return fmt::format("32 MiB tensor: current +{:.2f} MiB, peak {:.2f} MiB, after free {:+.2f} MiB", held / 1048576.0, peak / 1048576.0,
                     left / 1048576.0);
}

const char* backend_name(std::int64_t choice) {
  switch (static_cast<at::SDPBackend>(choice)) {
    case at::SDPBackend::math: return "math";
    case at::SDPBackend::flash_attention: return "flash";
    case at::SDPBackend::efficient_attention: return "memory-efficient";
    case at::SDPBackend::cudnn_attention: return "cuDNN";
    case at::SDPBackend::overrideable: return "overrideable";
    default: return "none";
  }
}

// Scaled dot-product attention: which backend ATen picks for each dtype, and that its output equals the math
// reference. On a GPU of compute capability 8.0 or newer, fp16 with head size 64 must not fall back to math.
std::string sdpa_check(c10::Device device) {
  std::vector<c10::ScalarType> dtypes = {at::kFloat};
  if (device.is_cuda()) dtypes = {at::kHalf, at::kBFloat16, at::kFloat};
  std::vector<std::string> parts;
  for (const auto dtype : dtypes) {
    const auto options = at::TensorOptions().device(device).dtype(dtype);
    const at::Tensor q = at::randn({2, 4, 128, 64}, options), k = at::randn({2, 4, 128, 64}, options), v = at::randn({2, 4, 128, 64}, options);
    const std::int64_t choice = at::_fused_sdp_choice(q, k, v, {}, 0.0, /*is_causal=*/true);
    const at::Tensor out = at::scaled_dot_product_attention(q, k, v, {}, 0.0, /*is_causal=*/true);
    const at::Tensor reference = std::get<0>(at::_scaled_dot_product_attention_math(q.to(at::kFloat), k.to(at::kFloat), v.to(at::kFloat), {}, 0.0, true));
    const double diff = max_diff(out, reference);
    const double tolerance = dtype == at::kFloat ? 1e-4 : dtype == at::kHalf ? 5e-3 : 3e-2;
    require(diff <= tolerance, fmt::format("{} with the {} backend differs from the math reference by {:.2e} (over {:.0e})", dtype_name(dtype),
                                           backend_name(choice), diff, tolerance));
    if (device.is_cuda() && dtype == at::kHalf && static_cast<at::SDPBackend>(choice) == at::SDPBackend::math) {
      const hw::GpuInfo* gpu = hw::first_supported_gpu(hw::HardwareInfo::get().cuda);
      const bool ampere_or_newer = gpu != nullptr && gpu->cc_major >= 8;
      require(!ampere_or_newer, "fp16 attention with head size 64 fell back to the math backend on a GPU with flash kernels (sm 8.0+)");
    }
    parts.push_back(fmt::format("{} -> {} (max |diff| vs math {:.1e})", dtype_name(dtype), backend_name(choice), diff));
  }
  return "causal [2, 4, 128, 64]: " + fmt::format("{}", fmt::join(parts, ", "));
}

// Runs `fn` when the check leaves, however it leaves: the global flags a check changed go back.
struct Restore {
  std::function<void()> fn;
  ~Restore() { fn(); }
};

// channels_last convolution equals the contiguous one and keeps its memory format. cuDNN's TF32 (on by default in
// LibTorch) would compare two TF32 convolutions that may take different algorithms: off for the check, restored.
std::string channels_last_check(c10::Device device) {
  auto& ctx = at::globalContext();
  const bool tf32_before = ctx.allowTF32CuDNN();
  ctx.setAllowTF32CuDNN(false);
  const Restore restore{[&] { ctx.setAllowTF32CuDNN(tf32_before); }};
  const auto options = at::TensorOptions().device(device);
  const at::Tensor x = at::randn({4, 8, 32, 32}, options), w = at::randn({16, 8, 3, 3}, options), b = at::randn({16}, options);
  const at::Tensor reference = at::conv2d(x, w, b, 1, 1);
  const at::Tensor out = at::conv2d(x.contiguous(at::MemoryFormat::ChannelsLast), w.contiguous(at::MemoryFormat::ChannelsLast), b, 1, 1);
  require(out.is_contiguous(at::MemoryFormat::ChannelsLast), "the convolution of channels_last tensors is not channels_last");
  const double diff = max_diff(out, reference);
  require(diff <= 1e-3, fmt::format("channels_last vs contiguous: max |difference| {:.2e}", diff));
  return fmt::format("conv2d 8 -> 16 channels, 3x3, [4, 8, 32, 32]: output channels_last, max |diff| vs contiguous {:.1e}", diff);
}

// The determinism flags: with deterministic algorithms on, ops that are otherwise free to use atomics (index_add_
// with repeated indices, a convolution's weight gradient) give bitwise the same result twice.
std::string determinism_check(c10::Device device) {
  auto& ctx = at::globalContext();
  const bool was = ctx.deterministicAlgorithms(), warn_only = ctx.deterministicAlgorithmsWarnOnly();
  const bool cudnn_det = ctx.deterministicCuDNN(), cudnn_bench = ctx.benchmarkCuDNN();
  ctx.setDeterministicAlgorithms(true, false);
  ctx.setDeterministicCuDNN(true);
  ctx.setBenchmarkCuDNN(false);
  const Restore restore{[&] {
    ctx.setDeterministicAlgorithms(was, warn_only);
    ctx.setDeterministicCuDNN(cudnn_det);
    ctx.setBenchmarkCuDNN(cudnn_bench);
  }};
  const auto options = at::TensorOptions().device(device);
  at::manual_seed(1);
  const at::Tensor index = at::randint(0, 16, {100000}, options.dtype(at::kLong));
  const at::Tensor source = at::randn({100000, 8}, options);
  const at::Tensor x = at::randn({8, 4, 32, 32}, options);
  const auto run = [&] {
    at::Tensor sums = at::zeros({16, 8}, options).index_add_(0, index, source);
    at::Tensor w = at::randn({8, 4, 3, 3}, options.dtype(at::kFloat)).fill_(0.1).requires_grad_(true);
    at::conv2d(x, w, {}, 1, 1).pow(2).sum().backward();
    return std::make_pair(sums, w.grad());
  };
  const auto first = run(), second = run();
  require(at::equal(first.first, second.first), "index_add_ with repeated indices differed between two runs");
  require(at::equal(first.second, second.second), "a convolution's weight gradient differed between two runs");
  return "deterministic algorithms + cuDNN deterministic: index_add_ (100,000 rows into 16) and conv2d's weight gradient bitwise equal "
         "twice; flags restored";
}

// One all-reduce between two ranks in threads: NCCL on two GPUs, Gloo on the CPU.
std::string all_reduce_check(c10::Device device) {
  if (device.is_cuda()) return internal::nccl_all_reduce();
  auto store = c10::make_intrusive<c10d::HashStore>();
  std::vector<double> sums(2, 0);
  internal::run_two_ranks("Gloo all-reduce", [&](int r) {
    auto backend = dist::make_backend("gloo", store, r, 2, std::chrono::seconds(30));
    std::vector<at::Tensor> t = {at::full({1024}, static_cast<float>(r + 1))};
    backend->allreduce(t)->wait();
    sums[static_cast<std::size_t>(r)] = t[0].sum().item<double>();
  });
  require(sums[0] == 3072 && sums[1] == 3072, fmt::format("Gloo all-reduce of 1 + 2 over 1024 elements summed to {} and {}, expected 3072",
                                                          sums[0], sums[1]));
  return "Gloo, 2 ranks in threads: 1 + 2 = 3 on every element of both ranks";
}

struct CheckSpec {
  std::string name;
  bool cuda_only = false;
  std::function<std::string(c10::Device)> run;
};

std::vector<CheckSpec> checks() {
  return {
      {"build", false, build_check},
      {"autocast bf16", false, [](c10::Device d) { return autocast_check(d, at::kBFloat16); }},
      {"autocast fp16", false, [](c10::Device d) { return autocast_check(d, at::kHalf); }},
      {"loss scaler skip and backoff", false, scaler_check},
      {"fused AdamW vs reference", false, [](c10::Device d) { return optimizer_check(d, "adamw"); }},
      {"fused SGD vs reference", false, [](c10::Device d) { return optimizer_check(d, "sgd"); }},
      {"pinned copy overlaps compute", true, internal::cuda_copy_overlap},
      {"stager vs synchronous copy", false, stager_check},
      {"memory statistics", false, memory_check},
      {"SDPA backend", false, sdpa_check},
      {"channels_last convolution", false, channels_last_check},
      {"CUDA graph replay", true, internal::cuda_graph_replay},
      {"CUDA graph failed capture", true, internal::cuda_graph_failed_capture},
      {"all-reduce", false, all_reduce_check},
      {"determinism flags", false, determinism_check},
  };
}

}  // namespace selftest_impl

void internal::run_two_ranks(const std::string& what, const std::function<void(int rank)>& fn) {
  std::vector<std::string> errors(2);
  std::vector<std::thread> ranks;
  for (int r = 0; r < 2; ++r) {
    ranks.emplace_back([&, r] {
      try {
        fn(r);
      } catch (...) {
        errors[static_cast<std::size_t>(r)] = report_current_exception().message;
      }
    });
  }
  for (auto& t : ranks) t.join();
  for (const auto& e : errors) {
    if (!e.empty()) throw SelftestFailure(what + ": " + e);
  }
}

bool SelftestReport::passed() const {
  return std::none_of(checks.begin(), checks.end(), [](const SelftestCheck& c) { return c.status == "fail"; });
}

SelftestReport run_selftest(const std::string& device_name) {
  BELLOWS_CHECK_KIND(ErrorKind::kUsage, device_name == "cpu" || device_name == "cuda" || device_name == "auto",
                     fmt::format("--device {}: expected cpu, cuda or auto", device_name), "bellows selftest --device cpu|cuda|auto");
  const auto& info = hw::HardwareInfo::get();
  const bool gpu_usable = info.cuda.usable;
  const std::string no_gpu = info.cuda.reason.empty() ? "no usable GPU" : info.cuda.reason;
  const bool on_cuda = device_name == "cuda" || (device_name == "auto" && gpu_usable);
  SelftestReport report;
  report.device = on_cuda ? "cuda:0" : "cpu";
  report.machine = app::machine_line(info);
  const c10::Device device = on_cuda ? c10::Device(c10::kCUDA, 0) : c10::Device(c10::kCPU);
  for (const auto& spec : selftest_impl::checks()) {
    SelftestCheck check;
    check.name = spec.name;
    const auto start = std::chrono::steady_clock::now();
    if (on_cuda && !gpu_usable && spec.name != "build") {  // what was compiled needs no GPU to check
      check.status = "skipped";
      check.detail = no_gpu;
    } else if (spec.cuda_only && !on_cuda) {
      check.status = "skipped";
      check.detail = "CUDA only (--device cuda)";
    } else {
      try {
        check.detail = spec.run(device);
        check.status = "pass";
      } catch (const internal::SelftestSkip& e) {
        check.status = "skipped";
        check.detail = e.what();
      } catch (const internal::SelftestFailure& e) {
        check.status = "fail";
        check.detail = e.what();
      } catch (...) {  // an error of the code under test: its first line, as the CLI reports errors
        check.status = "fail";
        check.detail = report_current_exception().message;
      }
    }
    check.seconds = bellows::seconds_since(start);
    report.checks.push_back(std::move(check));
  }
  return report;
}

std::string format_selftest(const SelftestReport& report) {
  std::size_t width = 5;
  for (const auto& c : report.checks) width = std::max(width, c.name.size());
  std::string out = fmt::format("bellows selftest on {}\n{}\n\n{:<{}}  {:<7}  {:>7}  {}\n", report.device, report.machine, "check", width, "result",
                                "seconds", "measurement (or why skipped)");
  int passed = 0, failed = 0, skipped = 0;
  for (const auto& c : report.checks) {
    out += fmt::format("{:<{}}  {:<7}  {:>7.2f}  {}\n", c.name, width, c.status, c.seconds, c.detail);
    passed += c.status == "pass";
    failed += c.status == "fail";
    skipped += c.status == "skipped";
  }
  out += fmt::format("\n{} passed, {} failed, {} skipped\n", passed, failed, skipped);
  return out;
}

nlohmann::json selftest_json(const SelftestReport& report) {
  nlohmann::json checks = nlohmann::json::array();
  for (const auto& c : report.checks) {
    checks.push_back({{"name", c.name}, {"status", c.status}, {"detail", c.detail}, {"seconds", c.seconds}});
  }
  return {{"device", report.device}, {"machine", report.machine}, {"passed", report.passed()}, {"checks", checks}};
}

}  // namespace bellows::lab
