// `bellows predict PATH --input FILE.npy|FILE.npz[:array] --output OUT.npy [--samples N] [--seed S] [--ema|--raw]
// [--batch-size N] [--device D] [--threads N] [--steps N] [--eta E]`: rebuilds the model of a checkpoint from
// the config in its manifest, loads its weights (the EMA weights when it has them, unless --raw) and writes the
// task's predictions for the input rows (Task::predict) as one .npy, atomically. Rows go through in batches;
// generative models draw per row from (seed, row index), so the result does not depend on --batch-size.
#include <ATen/ATen.h>
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <torch/csrc/autograd/grad_mode.h>

#include <algorithm>
#include <chrono>
#include <iostream>
#include <map>

#include "bellows/app/run_settings.h"
#include "bellows/ckpt/checkpoint.h"
#include "bellows/ckpt/inspect.h"
#include "bellows/data/build.h"
#include "bellows/data/npy.h"
#include "bellows/hw/hardware_info.h"
#include "bellows/models/scripted.h"
#include "bellows/plan/plan.h"
#include "bellows/train/checkpointing.h"
#include "bellows/app/model_setup.h"
#include "bellows/app/schema.h"
#include "bellows/util/check.h"
#include "bellows/util/format.h"
#include "bellows/util/timer.h"
#include "command.h"
#include "exit_codes.h"

namespace bellows::cli {
namespace {

namespace fs = std::filesystem;

struct PredictArgs {
  std::string path, input, output, device = "auto";
  std::int64_t samples = 1, batch_size = 256, steps = 0, threads = 0;
  std::uint64_t seed = 0;
  double eta = 0.0;
  bool ema = false, raw = false;
};

// The input rows: FILE.npy, FILE.npz:ARRAY, or FILE.npz (its array "x", or its only array).
std::pair<at::Tensor, std::string> read_input(const std::string& spec) {
  const auto colon = spec.find(".npz:");
  const fs::path file = colon == std::string::npos ? fs::path(spec) : fs::path(spec.substr(0, colon + 4));
  std::string key = colon == std::string::npos ? std::string() : spec.substr(colon + 5);
  BELLOWS_CHECK_DATA(fs::exists(file), fmt::format("--input {} does not exist", file.string()),
                     "give a .npy file or a .npz[:array]");
  data::NpyReadOptions read;
  read.mmap = false;
  at::Tensor x;
  if (file.extension() == ".npz") {
    if (key.empty()) {
      const auto names = data::list_npz(file);
      if (std::find(names.begin(), names.end(), "x") != names.end()) {
        key = "x";
      } else {
        BELLOWS_CHECK_DATA(
            names.size() == 1,
            fmt::format("--input {} holds the arrays {} and none is named x", file.string(), fmt::join(names, ", ")),
            fmt::format("name one: --input {}:ARRAY", file.string()));
        key = names.front();
      }
    }
    x = data::read_npz_array(file, key, read);  // kData listing the names when `key` is absent
  } else {
    BELLOWS_CHECK_USAGE(file.extension() == ".npy", fmt::format("--input {} is neither .npy nor .npz", spec),
                        "give FILE.npy or FILE.npz[:array]");
    x = data::read_npy(file, read);
  }
  const std::string name = key.empty() ? file.string() : file.string() + ":" + key;
  BELLOWS_CHECK_DATA(x.dim() >= 1 && x.size(0) > 0,
                     fmt::format("--input {} has shape {}: no rows", name, shape_of(x)),
                     "give an array with one input per row");
  if (at::isFloatingType(x.scalar_type())) x = x.to(at::kFloat);
  return {x, name};
}

// A model's other inputs (a TorchScript model's): with --input FILE.npz, the arrays of that file named by the run's
// data.npy.extra (each required), and those named like a batch tensor the model's inputs take (model.predict_inputs,
// else model.inputs: a text model's mask and segments; taken when the file has them), as batch tensors by those
// names; each must have the rows of x.
std::map<std::string, at::Tensor> read_extra_inputs(const std::string& spec, const config::Config& c, std::int64_t rows) {
  std::map<std::string, at::Tensor> out;
  const fs::path file(spec);
  if (file.extension() != ".npz") return out;
  const auto names = data::list_npz(file);
  const auto in_file = [&](const std::string& name) { return std::find(names.begin(), names.end(), name) != names.end(); };
  std::vector<std::string> wanted;
  for (const std::string& name : data::npy_extra_arrays(c)) {
    BELLOWS_CHECK_DATA(in_file(name), fmt::format("--input {} has no array '{}', which the model was trained with (data.npy.extra)", spec, name),
                       fmt::format("add it to the file: np.savez(..., x=..., {}=...)", name));
    wanted.push_back(name);
  }
  const models::ModelEntry& model = models::find_model(app::run_settings(c).model_name);
  for (const std::string& name : model.prediction_inputs ? model.prediction_inputs(c) : std::vector<std::string>{}) {
    if (in_file(name) && std::find(wanted.begin(), wanted.end(), name) == wanted.end()) wanted.push_back(name);
  }
  data::NpyReadOptions read;
  read.mmap = false;
  for (const std::string& name : wanted) {
    at::Tensor t = data::read_npz_array(file, name, read);
    BELLOWS_CHECK_DATA(t.dim() >= 1 && t.size(0) == rows,
                       fmt::format("--input {}:{} has shape {}, expected {} rows as x", spec, name, shape_of(t), rows),
                       "give every input array one row per input");
    if (at::isFloatingType(t.scalar_type())) t = t.to(at::kFloat);
    out.emplace(name, t);
  }
  return out;
}

// The checkpoint's weights: the EMA weights where it has them (unless raw), else the trained ones.
std::pair<std::map<std::string, at::Tensor>, bool> checkpoint_weights(const ckpt::Checkpoint& cp, const fs::path& path,
                                                                      const PredictArgs& a) {
  std::map<std::string, at::Tensor> weights = cp.model;
  bool has_ema = false;
  for (const auto& [name, t] : cp.state) has_ema = has_ema || name.rfind("ema.weights.", 0) == 0;
  BELLOWS_CHECK_DATA(!a.ema || has_ema, fmt::format("{} has no EMA weights", path.string()),
                     "train with ema.enabled: true, or predict without --ema");
  const bool use_ema = has_ema && !a.raw;
  if (use_ema) {
    for (auto& [name, t] : weights) {
      if (auto it = cp.state.find("ema.weights." + name); it != cp.state.end()) t = it->second;
    }
  }
  return {weights, use_ema};
}

int run_predict(const PredictArgs& a) {
  BELLOWS_CHECK_USAGE(!(a.ema && a.raw), "--ema and --raw both given",
                      "choose one: --ema (the default when the checkpoint has EMA weights) or --raw");
  BELLOWS_CHECK_USAGE(a.batch_size >= 1, fmt::format("--batch-size {} is not positive", a.batch_size),
                      "give a positive batch size");
  const auto start = std::chrono::steady_clock::now();

  // --- checkpoint: verified, with the resolved config of its run ---
  const fs::path path = ckpt::resolve_checkpoint(a.path);
  const ckpt::Checkpoint cp = ckpt::load_checkpoint(path, /*mmap=*/true);  // mapped: only the weights it loads are read
  BELLOWS_CHECK_DATA(cp.info.contains("config") && cp.info["config"].is_string(),
                     fmt::format("{} has no config in its manifest", path.string()),
                     "predict needs a checkpoint written by `bellows train` (its manifest holds the run's config)");
  config::Config c = config::Config::parse(cp.info["config"].get<std::string>(), (path / ckpt::kManifestFile).string());
  app::validate_run_config(c);
  const std::string model_name = app::run_settings(c).model_name;

  // --- model: rebuilt through the registry (what it needs of the data from the source's header), weights
  // loaded, on the device ---
  models::BuiltModel built = app::build_model(c, app::model_context_without_data(c), nullptr, /*load_imports=*/false);
  const auto [weights, use_ema] = checkpoint_weights(cp, path, a);
  train::load_model_tensors(*built.module, weights, /*strict=*/true);
  plan::PlanRequest request;
  request.device = a.device;
  request.precision = "fp32";
  request.workers = 0;
  request.threads = a.threads;
  const plan::Plan p = plan::resolve(request, hw::HardwareInfo::get());
  plan::apply(p);
  built.module->to(p.device);
  built.module->eval();

  // --- input rows, in batches ---
  const auto [x, input_name] = read_input(a.input);
  app::check_prediction_input(c, x, "--input " + input_name, " in the checkpoint's config");
  const std::map<std::string, at::Tensor> extra = read_extra_inputs(a.input, c, x.size(0));
  PredictOptions options;
  options.samples = a.samples;
  options.seed = a.seed;
  options.steps = a.steps;
  options.eta = a.eta;
  torch::NoGradGuard no_grad;
  std::vector<at::Tensor> outputs;
  const std::int64_t rows = x.size(0);
  for (std::int64_t first = 0; first < rows; first += a.batch_size) {
    data::Batch batch;
    batch.size = std::min(a.batch_size, rows - first);
    batch.tensors["x"] = x.slice(0, first, first + batch.size).to(p.device);
    for (const auto& [name, t] : extra) batch.tensors[name] = t.slice(0, first, first + batch.size).to(p.device);
    options.first_index = first;
    outputs.push_back(app::predict_batch(*built.task, *built.module, batch, options, "--input " + input_name).to(at::kCPU));
  }
  const at::Tensor result = at::cat(outputs, 0);

  // --- output: one .npy, written to a temporary name and renamed ---
  data::write_npy(a.output, result);
  const double seconds = seconds_since(start);
  std::cout << fmt::format(
      "wrote {}: {} {} ({} rows of {}; {}, {} weights of {} step {}; {}; {:.2f} s)\n", a.output,
      c10::toString(result.scalar_type()), shape_of(result), rows, input_name, model_name, use_ema ? "EMA" : "raw",
      path.filename().string(), cp.step,
      a.samples > 1 ? fmt::format("{} samples per row, seed {}", a.samples, a.seed) : fmt::format("seed {}", a.seed),
      seconds);
  return kExitOk;
}

}  // namespace

Action register_predict(CLI::App& app) {
  CLI::App* cmd = app.add_subcommand(
      "predict",
      "Predict with a trained model: bellows predict PATH --input FILE.npy|FILE.npz[:array] --output OUT.npy; "
      "regression: outputs [rows, out]; classification: class probabilities [rows, classes]; "
      "ddpm: samples [rows, out], or [rows, N, out] with --samples N > 1");
  auto a = std::make_shared<PredictArgs>();
  cmd->add_option("PATH", a->path,
                  "Checkpoint (step-XXXXXXXXX), checkpoints/ or run directory (its newest valid checkpoint)")
      ->required();
  cmd->add_option("--input", a->input, "Input rows: FILE.npy, FILE.npz:ARRAY, or FILE.npz (array x, or its only array)")
      ->required();
  cmd->add_option("--output", a->output, "Destination .npy (written atomically)")->required();
  cmd->add_option("--samples", a->samples, "Draws per input row (generative models)")->capture_default_str();
  cmd->add_option("--seed", a->seed, "Seed of the draws (per row: seed and row index)")->capture_default_str();
  cmd->add_flag("--ema", a->ema,
                "Use the EMA weights (the default when the checkpoint has them; an error when it has none)");
  cmd->add_flag("--raw", a->raw, "Use the trained weights, not their EMA");
  cmd->add_option("--batch-size", a->batch_size, "Input rows per batch")->capture_default_str();
  cmd->add_option("--device", a->device, "auto | cpu | cuda | cuda:N")->capture_default_str();
  cmd->add_option("--threads", a->threads, "Intra-op CPU threads (0: one per usable core)")->capture_default_str();
  cmd->add_option("--steps", a->steps, "ddpm: 0 = ancestral sampling over all T steps; N = DDIM over N steps")
      ->capture_default_str();
  cmd->add_option("--eta", a->eta, "ddpm with --steps: DDIM noise (0 deterministic, 1 ancestral-like)")
      ->capture_default_str();
  return [cmd, a]() {
    if (!cmd->parsed()) return -1;
    return run_predict(*a);
  };
}

}  // namespace bellows::cli
