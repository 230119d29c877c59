// Benchmark: what activation checkpointing saves and costs on W3 (Transformer encoder, 4 layers, d_model 256,
// 4 heads, ff 1024, windows of 128 x 16, batch 32) and W4 (ResNet-18, 10 classes, 3x128x128, batch 32), on
// the machine it runs on (sizes from ../shared/WORKLOADS.md).
//
// For each workload, with every block checkpointed and without: the peak tensor memory of one training step
// (forward + backward, counted by bellows' CPU allocator, obs/memory.h) above what was held before it, and
// the time per step, median over alternating trials (A B A B ...). Memory numbers are exact byte counts;
// times are this machine's, for the ratio.
//
//   build/bin/bellows_bench_checkpointing [--trials T] [--steps K] [--batch B] [--only w3|w4]
#include <ATen/ATen.h>
#include <fmt/format.h>
#include <torch/torch.h>

#include <algorithm>
#include <chrono>

#include "bellows/app/run_settings.h"
#include "bellows/app/schema.h"
#include "bellows/config/config.h"
#include "bellows/models/activation_checkpoint.h"
#include "bellows/models/registry.h"
#include "bellows/obs/memory.h"

using namespace bellows;

namespace {

struct Args {
  std::int64_t trials = 5, steps = 2, batch = 32;
  std::string only;
};

Args parse(int argc, char** argv) {
  Args a;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string k = argv[i], v = argv[i + 1];
    if (k == "--trials") a.trials = std::stoll(v);
    else if (k == "--steps") a.steps = std::stoll(v);
    else if (k == "--batch") a.batch = std::stoll(v);
    else if (k == "--only") a.only = v;
    else throw std::runtime_error("unknown flag " + k);
  }
  return a;
}

struct Workload {
  std::string name;
  std::string model_yaml;  // the run config's model block
  data::Batch batch;
};

models::BuiltModel build(const Workload& w) {
  config::Config c = config::Config::parse(w.model_yaml, w.name);
  app::validate_run_config(c);
  torch::manual_seed(0);
  return models::find_model(app::run_settings(c).model_name).build(c, {});
}

// One training step's peak bytes above the memory held before it.
std::int64_t step_peak(models::BuiltModel& m, const data::Batch& batch) {
  const c10::Device cpu(c10::kCPU);
  obs::reset_peak(cpu);
  const std::int64_t base = obs::memory_stats(cpu).current_bytes;
  m.task->step(*m.module, batch).loss.backward();
  const std::int64_t peak = obs::memory_stats(cpu).peak_bytes - base;
  for (auto& p : m.module->parameters()) p.mutable_grad() = at::Tensor();
  return peak;
}

double step_seconds(models::BuiltModel& m, const data::Batch& batch, std::int64_t steps) {
  const auto t0 = std::chrono::steady_clock::now();
  for (std::int64_t i = 0; i < steps; ++i) {
    m.task->step(*m.module, batch).loss.backward();
    for (auto& p : m.module->parameters()) p.mutable_grad() = at::Tensor();
  }
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() / static_cast<double>(steps);
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.size() % 2 ? v[v.size() / 2] : 0.5 * (v[v.size() / 2 - 1] + v[v.size() / 2]);
}

void measure(const Workload& w, const Args& a) {
  models::BuiltModel m = build(w);
  m.module->train();
  auto* blocks = dynamic_cast<models::Checkpointable*>(m.module.get());
  if (blocks == nullptr) throw std::runtime_error(w.name + ": the model is not checkpointable");
  const auto all = blocks->checkpoint_blocks();
  blocks->set_checkpointed({});
  step_seconds(m, w.batch, 1);  // warm-up
  const std::int64_t plain_peak = step_peak(m, w.batch);
  blocks->set_checkpointed(all);
  step_seconds(m, w.batch, 1);
  const std::int64_t ck_peak = step_peak(m, w.batch);
  std::vector<double> plain_t, ck_t;
  for (std::int64_t t = 0; t < a.trials; ++t) {
    blocks->set_checkpointed({});
    plain_t.push_back(step_seconds(m, w.batch, a.steps));
    blocks->set_checkpointed(all);
    ck_t.push_back(step_seconds(m, w.batch, a.steps));
  }
  const double tp = median(plain_t), tc = median(ck_t);
  fmt::print("{:<4} {:>2} blocks | step peak memory: plain {:8.1f} MB, checkpointed {:8.1f} MB, saving {:5.1f}% | "
             "time per step: plain {:7.1f} ms, checkpointed {:7.1f} ms, cost {:+5.1f}% (median of {} trials x {} steps; "
             "plain {:.1f}..{:.1f}, checkpointed {:.1f}..{:.1f})\n",
             w.name, all.size(), plain_peak / 1e6, ck_peak / 1e6, 100.0 * (1.0 - double(ck_peak) / double(plain_peak)), 1e3 * tp,
             1e3 * tc, 100.0 * (tc / tp - 1.0), a.trials, a.steps, 1e3 * *std::min_element(plain_t.begin(), plain_t.end()),
             1e3 * *std::max_element(plain_t.begin(), plain_t.end()), 1e3 * *std::min_element(ck_t.begin(), ck_t.end()),
             1e3 * *std::max_element(ck_t.begin(), ck_t.end()));
}

}  // namespace

int main(int argc, char** argv) {
  try {
    const Args a = parse(argc, argv);
    if (!obs::install_cpu_tracking()) throw std::runtime_error("the counting CPU allocator could not be installed");
    torch::manual_seed(0);
    std::vector<Workload> workloads;
    if (a.only.empty() || a.only == "w3") {
      Workload w3{"W3",
                  "model: {name: transformer, in_features: 16, d_model: 256, heads: 4, layers: 4, ff: 1024, dropout: 0.1, "
                  "max_len: 128, out_features: 16}\n",
                  {}};
      w3.batch.tensors = {{"x", at::randn({a.batch, 128, 16})}, {"y", at::randn({a.batch, 16})}};
      w3.batch.size = a.batch;
      workloads.push_back(std::move(w3));
    }
    if (a.only.empty() || a.only == "w4") {
      Workload w4{"W4", "model: {name: resnet, depth: 18, out_features: 10, in_channels: 3}\n", {}};
      w4.batch.tensors = {{"x", at::randn({a.batch, 3, 128, 128})}, {"y", at::randint(0, 10, {a.batch}, at::kLong)}};
      w4.batch.size = a.batch;
      workloads.push_back(std::move(w4));
    }
    fmt::print("activation checkpointing, {} intra-op threads, batch {}\n", at::get_num_threads(), a.batch);
    for (const auto& w : workloads) measure(w, a);
    return 0;
  } catch (const std::exception& e) {
    fmt::print(stderr, "bellows_bench_checkpointing: {}\n", e.what());
    return 1;
  }
}
