// The CUDA-only checks of `bellows selftest` (app/internal/selftest_cuda.h): streams, events, graphs, NCCL.
#include <ATen/ATen.h>
#include <ATen/cuda/CUDAEvent.h>
#include <c10/cuda/CUDAFunctions.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <fmt/format.h>
#include <torch/csrc/distributed/c10d/HashStore.hpp>

#include <chrono>
#include <cmath>

#include "lab/internal/selftest_cuda.h"
#include "bellows/obs/memory.h"
#include "bellows/train/step_graph.h"  // defines: make_cuda_step_graph
#include "bellows/util/cuda_units.h"  // defines: register_cuda_unit
#include "dist/backend.h"

namespace bellows::lab::internal {
namespace selftest_cuda_impl {

// Milliseconds between two events recorded around fn() on the current stream.
template <typename Fn>
float time_ms(Fn&& fn) {
  at::cuda::CUDAEvent start(cudaEventDefault), stop(cudaEventDefault);
  start.record();
  fn();
  stop.record();
  stop.synchronize();
  return start.elapsed_time(stop);
}

// A small MLP (weights in `params`) and one SGD step of it on static inputs: what the graph captures.
struct Mlp {
  std::vector<at::Tensor> params;
  void step(const at::Tensor& x, const at::Tensor& y, double lr) {
    for (auto& p : params) {
      if (p.grad().defined()) p.mutable_grad().zero_();
    }
    at::Tensor h = x;
    for (std::size_t i = 0; i + 1 < params.size(); i += 2) {
      h = at::linear(h, params[i], params[i + 1]);
      if (i + 2 < params.size()) h = at::relu(h);
    }
    at::mse_loss(h, y).backward();
    at::NoGradGuard no_grad;
    for (auto& p : params) p.sub_(p.grad(), lr);
  }
};

}  // namespace selftest_cuda_impl

using selftest_cuda_impl::time_ms;

std::string cuda_copy_overlap(c10::Device device) {
  c10::cuda::CUDAGuard guard(device);
  constexpr std::int64_t kFloats = 64 << 20;  // 256 MiB
  const at::Tensor host = at::empty({kFloats}, at::TensorOptions().dtype(at::kFloat).pinned_memory(true)).fill_(1.0f);
  at::Tensor dst = at::empty({kFloats}, at::TensorOptions().device(device));
  const at::Tensor a = at::randn({4096, 4096}, at::TensorOptions().device(device));
  at::Tensor c = at::empty_like(a);
  const auto compute_stream = c10::cuda::getCurrentCUDAStream(device.index());
  const auto copy_stream = c10::cuda::getStreamFromPool(false, device.index());
  const auto copy = [&] {
    c10::cuda::CUDAStreamGuard on_copy(copy_stream);
    dst.copy_(host, /*non_blocking=*/true);
  };
  const auto compute = [&](int n) {
    for (int i = 0; i < n; ++i) at::mm_out(c, a, a);
  };
  copy();  // warm-up
  compute(2);
  c10::cuda::device_synchronize();
  // The copy alone (events on the copy stream), then as many products as take about as long.
  float copy_ms = 0;
  {
    c10::cuda::CUDAStreamGuard on_copy(copy_stream);
    copy_ms = time_ms([&] { dst.copy_(host, true); });
  }
  const float one_mm = time_ms([&] { compute(4); }) / 4;
  const int products = std::max(1, static_cast<int>(copy_ms / std::max(one_mm, 1e-3f)));
  const float compute_ms = time_ms([&] { compute(products); });
  // Both: the copy stream starts with the compute stream and the compute stream waits for the copy at the end.
  at::cuda::CUDAEvent start(cudaEventDefault), copied(cudaEventDefault), stop(cudaEventDefault);
  start.record(compute_stream);
  start.block(copy_stream);
  copy();
  copied.record(copy_stream);
  compute(products);
  copied.block(compute_stream);
  stop.record(compute_stream);
  stop.synchronize();
  const float both_ms = start.elapsed_time(stop);
  const float hidden = (copy_ms + compute_ms - both_ms) / std::min(copy_ms, compute_ms);
  const double gbps = 256.0 / 1024.0 / (copy_ms / 1000.0);
  if (!dst.eq(1.0f).all().item<bool>()) {
    throw SelftestFailure("the copied buffer does not hold what the pinned buffer held");
  }
  const std::string detail = fmt::format("256 MiB pinned copy {:.2f} ms ({:.1f} GB/s), {} matrix products {:.2f} ms, together {:.2f} ms: "
                                         "{:.0f}% of the shorter hidden", copy_ms, gbps, products, compute_ms, both_ms, 100 * hidden);
  if (hidden < 0.5) throw SelftestFailure(detail + " (expected 50% or more)");
  return detail;
}

std::string cuda_graph_replay(c10::Device device) {
  c10::cuda::CUDAGuard guard(device);
  const auto options = at::TensorOptions().device(device);
  at::manual_seed(0);
  selftest_cuda_impl::Mlp mlp;
  for (const auto& [out, in] : std::vector<std::pair<int, int>>{{512, 256}, {512, 512}, {64, 512}}) {
    mlp.params.push_back((at::randn({out, in}, options) / std::sqrt(in)).requires_grad_(true));
    mlp.params.push_back(at::zeros({out}, options).requires_grad_(true));
  }
  const at::Tensor x = at::randn({256, 256}, options), y = at::randn({256, 64}, options);
  constexpr double kLr = 1e-3;
  constexpr int kSteps = 20;
  // The trainer's own graph (train/step_graph.h): warm-up on a side stream (the autograd engine and cuBLAS make their
  // workspaces there), then one step captured.
  const std::unique_ptr<train::StepGraph> graph = train::make_cuda_step_graph(device);
  const auto step = [&] { mlp.step(x, y, kLr); };
  for (std::int64_t i = 0; i < train::kStepGraphWarmup; ++i) graph->warm_up(step);
  graph->capture(step);
  c10::cuda::device_synchronize();
  std::vector<at::Tensor> start;
  for (const auto& p : mlp.params) start.push_back(p.detach().clone());
  const auto reset = [&] {
    at::NoGradGuard no_grad;
    for (std::size_t i = 0; i < start.size(); ++i) mlp.params[i].copy_(start[i]);
  };
  const float graph_ms = time_ms([&] {
    for (int i = 0; i < kSteps; ++i) graph->replay();
  });
  std::vector<at::Tensor> replayed;
  for (const auto& p : mlp.params) replayed.push_back(p.detach().clone());
  reset();
  const float eager_ms = time_ms([&] {
    for (int i = 0; i < kSteps; ++i) mlp.step(x, y, kLr);
  });
  double diff = 0;
  for (std::size_t i = 0; i < replayed.size(); ++i) {
    diff = std::max(diff, (replayed[i] - mlp.params[i].detach()).abs().max().item<double>());
  }
  const std::string detail = fmt::format("MLP 256-512-512-64, batch 256, {} SGD steps: graph {:.3f} ms/step, eager {:.3f} ms/step ({:.2f}x); "
                                         "max |graph - eager| {:.1e}", kSteps, graph_ms / kSteps, eager_ms / kSteps, eager_ms / graph_ms, diff);
  if (diff > 1e-5) throw SelftestFailure(detail + " (over 1e-5)");
  return detail;
}

std::string cuda_graph_failed_capture(c10::Device device) {
  c10::cuda::CUDAGuard guard(device);
  const auto options = at::TensorOptions().device(device);
  const auto reserved_mib = [&] {  // after the allocator gave back what it can: what it still holds
    c10::cuda::device_synchronize();
    obs::release_cached_memory(device);
    return static_cast<double>(obs::memory_stats(device).reserved_bytes) / (1 << 20);
  };
  const at::Tensor x = at::randn({16 << 20}, options);  // 64 MiB
  at::Tensor y;
  const double before = reserved_mib();
  // A step that reads a value back (a host sync) cannot be captured: the capture fails, as the trainer's does when a
  // model calls .item() in its step; the random op makes the capture use the default generator's graph state.
  std::string why;
  {
    const std::unique_ptr<train::StepGraph> graph = train::make_cuda_step_graph(device);
    const auto reads_back = [&] {
      y = at::dropout(x, 0.5, /*train=*/true) * 2;
      (void)y.sum().item<float>();
    };
    graph->warm_up(reads_back);
    try {
      graph->capture(reads_back);
    } catch (const std::exception& e) {
      why = e.what();
      why = why.substr(0, why.find('\n'));
    }
    if (why.empty()) throw SelftestFailure("a capture of a step that reads a value back did not fail");
  }
  // Afterwards: random ops and allocations work eagerly, and the capture's pool went back to the device.
  y = at::dropout(x, 0.5, /*train=*/true);
  y.reset();
  const double after = reserved_mib();
  if (after > before + 8) {
    throw SelftestFailure(fmt::format("after the failed capture the caching allocator still holds {:.0f} MiB (before: {:.0f} MiB): its "
                                      "pool was not released", after, before));
  }
  // A new capture of a clean step replays.
  const std::unique_ptr<train::StepGraph> graph = train::make_cuda_step_graph(device);
  at::Tensor out = at::empty_like(x);
  const auto step = [&] { at::mul_out(out, x, 3); };
  graph->warm_up(step);
  graph->capture(step);
  out.zero_();
  graph->replay();
  const double diff = (out - x * 3).abs().max().item<double>();
  if (diff != 0) throw SelftestFailure(fmt::format("a capture after the failed one replayed with max |difference| {:.1e}", diff));
  return fmt::format("a step that reads a value back: capture failed ({}); then eager dropout ran, the allocator held {:.0f} MiB "
                     "(before: {:.0f}), a new capture replayed exactly", why.substr(0, 60), after, before);
}

std::string nccl_all_reduce() {
  const int gpus = static_cast<int>(c10::cuda::device_count());
  if (gpus < 2) throw SelftestSkip(fmt::format("{} GPU: an all-reduce over NCCL needs two", gpus));
  auto store = c10::make_intrusive<c10d::HashStore>();
  std::vector<int> right(2, 0);
  std::vector<float> ms(2, 0);
  run_two_ranks("NCCL all-reduce", [&](int r) {
    c10::cuda::CUDAGuard guard(static_cast<c10::DeviceIndex>(r));
    auto backend = dist::make_nccl_backend(store, r, 2, std::chrono::seconds(60));
    std::vector<at::Tensor> t = {at::full({64 << 20}, static_cast<float>(r + 1), at::TensorOptions().device(c10::kCUDA, r))};
    backend->allreduce(t)->wait();  // the first one sets NCCL up
    t[0].fill_(static_cast<float>(r + 1));
    ms[static_cast<std::size_t>(r)] = time_ms([&] { backend->allreduce(t)->wait(); });
    right[static_cast<std::size_t>(r)] = t[0].eq(3.0f).all().item<bool>();
  });
  if (!right[0] || !right[1]) throw SelftestFailure("NCCL all-reduce of 1 + 2 did not give 3 everywhere");
  return fmt::format("NCCL, cuda:0 and cuda:1: 1 + 2 = 3 on all 64M elements; 256 MiB in {:.2f} ms", std::max(ms[0], ms[1]));
}

}  // namespace bellows::lab::internal

namespace {
const bool kRegisteredSelftestCuda = bellows::util::register_cuda_unit("lab/selftest_cuda");  // util/cuda_units.h
}  // namespace
