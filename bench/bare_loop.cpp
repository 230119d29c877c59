// The floor bellows' per-step machinery is measured against: a bare LibTorch training loop over the same model.
//
// What is the same as `bellows train CONFIG key=value...`: the config (resolved the same way), the plan's thread
// count, the seed, the model (built through the registry, init_weights loaded), the batches (the training data
// in order, as bellows reads it with data.shuffle=false), the loss (the model's task), AdamW on ATen's fused
// kernel with the same weight-decay groups, a constant learning rate, and bf16 autocast when the precision is
// bf16-mixed. What is not there: the Trainer, the loader and its thread, the precision policy and non-finite
// check, gradient norms, meters, sinks, hooks, checkpoints. Every batch is collated into memory before the
// clock starts, and nothing is read back from the tensors inside the timed loop.
//
//   build/bin/bellows_bare_loop CONFIG [key=value ...] [--steps N] [--warmup W] [--json FILE]
// Prints (and writes to FILE) {"samples_per_s", "step_ms" (median), "losses" (every step's, warm-up included),
// "batch_size", "steps", "warmup", "precision", "threads"}. bench/peers/run.sh runs it beside bellows for W1/W3/W5.
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <fmt/format.h>
#include <torch/torch.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "bellows/app/data_setup.h"
#include "bellows/app/model_setup.h"
#include "bellows/app/run.h"
#include "bellows/app/run_settings.h"
#include "bellows/app/schema.h"
#include "bellows/app/trainer_setup.h"
#include "bellows/data/build.h"
#include "bellows/data/dataset.h"
#include "bellows/hw/hardware_info.h"
#include "bellows/plan/plan.h"
#include "bellows/precision/autocast.h"
#include "bellows/util/error.h"
#include "bellows/util/module_tensors.h"

namespace fs = std::filesystem;
using namespace bellows;

namespace {

struct Args {
  fs::path config;
  std::vector<std::string> overrides;
  std::int64_t steps = 50, warmup = 10;
  fs::path json;
};

Args parse(int argc, char** argv) {
  Args a;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) throw std::runtime_error(arg + " needs a value");
      return argv[++i];
    };
    if (arg == "--steps") a.steps = std::stoll(value());
    else if (arg == "--warmup") a.warmup = std::stoll(value());
    else if (arg == "--json") a.json = value();
    else if (arg.find('=') != std::string::npos) a.overrides.push_back(arg);
    else if (a.config.empty()) a.config = arg;
    else throw std::runtime_error("unexpected argument '" + arg + "'");
  }
  if (a.config.empty()) throw std::runtime_error("usage: bellows_bare_loop CONFIG [key=value ...] [--steps N] [--warmup W] [--json FILE]");
  if (a.steps < 1 || a.warmup < 0) throw std::runtime_error("--steps must be >= 1 and --warmup >= 0");
  return a;
}

// AdamW with ATen's fused kernel, one call per weight-decay group: the update bellows' optimizer makes.
struct BareAdamW {
  struct Group {
    std::vector<at::Tensor> params, exp_avg, exp_avg_sq, steps;
    double weight_decay = 0;
  };
  std::vector<Group> groups;
  double lr, beta1, beta2, eps;

  void step() {
    at::NoGradGuard no_grad;
    for (auto& g : groups) {
      std::vector<at::Tensor> grads;
      grads.reserve(g.params.size());
      for (const auto& p : g.params) grads.push_back(p.grad());
      at::_foreach_add_(g.steps, 1);
      at::_fused_adamw_(g.params, grads, g.exp_avg, g.exp_avg_sq, {}, g.steps, lr, beta1, beta2, g.weight_decay, eps,
                        /*amsgrad=*/false, /*maximize=*/false);
    }
  }
  void zero_grad() {
    for (auto& g : groups) {
      for (auto& p : g.params) p.mutable_grad().reset();
    }
  }
};

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0.0 : v[v.size() / 2];
}

// The model as `bellows train` builds it (through the registry, init_weights loaded), on the plan's device, in training
// mode.
models::BuiltModel bare_model(const config::Config& c, const plan::Plan& p, const data::DataSplits& splits) {
  models::BuiltModel built = app::build_model(c, app::model_context(c, splits));
  if (const std::string init = app::run_settings(c).init_weights; !init.empty()) {
    app::import_weights(*built.module, models::WeightImport{init, "", true, "model", "init_weights_strict"});
  }
  built.module->to(p.device);
  built.module->train();
  return built;
}

// The first `total` training batches in order (fewer where the data hold fewer full batches; the loop cycles
// through them), collated onto `device` before timing.
std::vector<data::Batch> collated_batches(const data::Dataset& train, std::int64_t batch_size, std::int64_t total,
                                          const at::Device& device) {
  const std::int64_t full_batches = train.size() / batch_size;
  if (full_batches < 1) throw std::runtime_error("fewer training samples than one batch");
  std::vector<data::Batch> batches;
  data::FetchContext context;
  for (std::int64_t b = 0; b < std::min(total, full_batches); ++b) {
    std::vector<std::int64_t> indices(static_cast<std::size_t>(batch_size));
    for (std::int64_t i = 0; i < batch_size; ++i) indices[static_cast<std::size_t>(i)] = b * batch_size + i;
    data::Batch batch = train.get_batch(indices, context);
    train.finish_on_device(batch);
    batches.push_back(batch.to(device, false));
  }
  return batches;
}

// The optimizer: bellows' own parameter groups (no weight decay on biases and norms), updated by the fused kernel
// alone.
BareAdamW bare_adamw(const train::OptimizerOptions& options, torch::nn::Module& module) {
  const train::Optimizer grouping(bellows::named_parameters(module), options);
  BareAdamW opt;
  opt.lr = options.lr;
  opt.beta1 = options.beta1;
  opt.beta2 = options.beta2;
  opt.eps = options.eps;
  for (const auto& group : grouping.groups()) {
    BareAdamW::Group& g = opt.groups.emplace_back();
    g.weight_decay = group.weight_decay;
    for (const auto& t : group.params) {
      g.params.push_back(t);
      g.exp_avg.push_back(at::zeros_like(t));
      g.exp_avg_sq.push_back(at::zeros_like(t));
      g.steps.push_back(at::zeros({}, t.options().dtype(at::kFloat)));
    }
  }
  return opt;
}

// Every step's loss (warm-up included, still on the device) and the seconds of each step after the warm-up.
struct LoopTimes {
  std::vector<at::Tensor> losses;
  std::vector<double> step_s;
};

// The loop: forward (under bf16 autocast for bf16-mixed), backward, the update; nothing read back.
LoopTimes timed_loop(const Args& a, const plan::Plan& p, models::BuiltModel& built,
                     const std::vector<data::Batch>& batches, BareAdamW& opt) {
  const bool bf16 = p.precision == "bf16-mixed";
  LoopTimes times;
  for (std::int64_t i = 0; i < a.warmup + a.steps; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    const data::Batch& batch = batches[static_cast<std::size_t>(i % static_cast<std::int64_t>(batches.size()))];
    StepOutput out;
    {
      std::optional<precision::AutocastGuard> autocast;
      if (bf16) autocast.emplace(p.device.type(), at::kBFloat16, true);
      out = built.task->step(*built.module, batch);
    }
    out.loss.backward();
    opt.step();
    opt.zero_grad();
    times.losses.push_back(out.loss.detach());
    if (i >= a.warmup) {
      times.step_s.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    }
  }
  return times;
}

// Prints the report (and writes it to --json FILE).
void report(const Args& a, std::int64_t batch_size, const plan::Plan& p, const LoopTimes& times) {
  double timed = 0;
  for (double s : times.step_s) timed += s;

  nlohmann::json j;
  j["samples_per_s"] = static_cast<double>(a.steps * batch_size) / timed;
  j["step_ms"] = 1e3 * median(times.step_s);
  j["batch_size"] = batch_size;
  j["steps"] = a.steps;
  j["warmup"] = a.warmup;
  j["precision"] = p.precision;
  j["threads"] = at::get_num_threads();
  j["losses"] = nlohmann::json::array();
  for (const auto& l : times.losses) j["losses"].push_back(l.item<double>());
  std::cout << j.dump() << "\n";
  if (!a.json.empty()) std::ofstream(a.json) << j.dump(1) << "\n";
}

int run(const Args& a) {
  config::Config c = app::resolve_config(a.config, a.overrides);
  const plan::Plan p = plan::resolve(app::plan_request(c), hw::HardwareInfo::get());
  plan::apply(p);
  const auto seed = static_cast<std::uint64_t>(app::run_settings(c).seed);
  torch::manual_seed(seed);
  models::set_dropout_masks(app::dropout_masks_setting(c));

  const data::DataSplits splits = data::build_datasets(c, seed);
  models::BuiltModel built = bare_model(c, p, splits);
  const std::int64_t batch_size = app::loaded_batch_size(c);
  const std::vector<data::Batch> batches = collated_batches(*splits.train, batch_size, a.warmup + a.steps, p.device);
  BareAdamW opt = bare_adamw(app::trainer_options(c, p).optimizer, *built.module);
  report(a, batch_size, p, timed_loop(a, p, built, batches, opt));
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run(parse(argc, argv));
  } catch (const bellows::Error& e) {
    std::fprintf(stderr, "bellows_bare_loop: %s\n  hint: %s\n", e.message().c_str(), e.hint().c_str());
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bellows_bare_loop: %s\n", e.what());
  }
  return 1;
}
