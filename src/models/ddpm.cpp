// The conditional DDPM, its noise schedules, samplers and task; see ddpm.h.
#include "bellows/models/ddpm.h"

#include "bellows/models/flops.h"

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <torch/csrc/autograd/grad_mode.h>

#include <algorithm>
#include <cmath>
#include <numbers>

#include "bellows/config/binding.h"  // defines: Binding
#include "bellows/data/dataset.h"
#include "bellows/models/registry.h"
#include "bellows/util/check.h"
#include "bellows/util/format.h"  // defines: shape_of

namespace bellows::models {

at::Tensor make_betas(const std::string& schedule, std::int64_t steps) {
  BELLOWS_CHECK_CONFIG(steps >= 1, fmt::format("diffusion steps {} is not positive", steps),
                       "set model.steps to T >= 1 (50 in W5)");
  constexpr double kMaxBeta = 0.999;
  if (schedule == "linear") {
    const double scale = 1000.0 / static_cast<double>(steps);
    return at::linspace(scale * 1e-4, scale * 0.02, steps, at::kDouble).clamp_max(kMaxBeta);
  }
  if (schedule == "cosine") {
    constexpr double s = 0.008;
    auto f = [&](double t) {
      const double c = std::cos((t / static_cast<double>(steps) + s) / (1 + s) * std::numbers::pi / 2);
      return c * c;
    };
    at::Tensor betas = at::empty({steps}, at::kDouble);
    auto* b = betas.data_ptr<double>();
    for (std::int64_t i = 0; i < steps; ++i) b[i] = std::min(1 - f(double(i + 1)) / f(double(i)), kMaxBeta);
    return betas;
  }
  BELLOWS_FAIL(ErrorKind::kConfig, fmt::format("unknown noise schedule '{}'", schedule),
               "set model.schedule to linear or cosine");
}

DdpmImpl::DdpmImpl(const DdpmOptions& options) : options_(options) {
  const auto& o = options;
  BELLOWS_CHECK_CONFIG(
      o.context_features > 0 && o.out_features > 0 && o.hidden > 0 && o.layers > 0,
      fmt::format("ddpm context_features={} out_features={} hidden={} layers={}, expected positive", o.context_features,
                  o.out_features, o.hidden, o.layers),
      "set model.context_features, model.out_features, model.hidden and model.layers to positive values");
  BELLOWS_CHECK_CONFIG(o.time_embedding >= 2 && o.time_embedding % 2 == 0,
                       fmt::format("ddpm time_embedding={} is not a positive even number", o.time_embedding),
                       "set model.time_embedding to an even width (cos and sin halves), e.g. 32");
  const std::int64_t h = o.hidden;
  context_encoder_ = register_module("context_encoder", torch::nn::Linear(o.context_features, h));
  input_ = register_module("input", torch::nn::Linear(o.out_features + o.time_embedding + h, h));
  blocks_ = register_module("blocks", torch::nn::ModuleList());
  for (std::int64_t i = 0; i + 1 < o.layers; ++i) {
    torch::nn::Linear block(h, h);
    blocks_->push_back(block);
    block_fns_.emplace_back([block](const at::Tensor& x) mutable { return x + at::silu(block->forward(x)); });
  }
  output_ = register_module("output", torch::nn::Linear(h, o.out_features));
  const at::Tensor betas = make_betas(o.schedule, o.steps);
  betas_ = register_buffer("betas", betas.to(at::kFloat));
  alphas_cumprod_ = register_buffer("alphas_cumprod", (1 - betas).cumprod(0).to(at::kFloat));
}

at::Tensor DdpmImpl::timestep_embedding(const at::Tensor& t, std::int64_t dim, c10::ScalarType dtype) {
  const std::int64_t half = dim / 2;
  const at::Tensor k = at::arange(half, t.options().dtype(at::kFloat));
  const at::Tensor freqs = at::exp(k * (-std::log(10000.0) / static_cast<double>(half)));
  const at::Tensor args = t.to(at::kFloat).unsqueeze(1) * freqs.unsqueeze(0);
  return at::cat({args.cos(), args.sin()}, 1).to(dtype);
}

at::Tensor DdpmImpl::forward(const at::Tensor& x_t, const at::Tensor& t, const at::Tensor& context) {
  const auto& o = options_;
  BELLOWS_CHECK_DATA(x_t.dim() == 2 && x_t.size(1) == o.out_features,
                     fmt::format("ddpm x_t has shape {}, expected [batch, {}]", shape_of(x_t.sizes()), o.out_features),
                     "the data's targets 'y' must have model.out_features values per sample");
  BELLOWS_CHECK_DATA(context.dim() == 2 && context.size(1) == o.context_features && context.size(0) == x_t.size(0),
                     fmt::format("ddpm context has shape {}, expected [{}, {}]", shape_of(context.sizes()), x_t.size(0),
                                 o.context_features),
                     "the data's inputs 'x' must have model.context_features values per sample");
  BELLOWS_CHECK_DATA(t.dim() == 1 && t.size(0) == x_t.size(0),
                     fmt::format("ddpm timesteps have shape {}, expected [{}]", shape_of(t.sizes()), x_t.size(0)),
                     "pass one timestep per sample");
  const at::Tensor temb = timestep_embedding(t, o.time_embedding, x_t.scalar_type());
  const at::Tensor c = at::silu(context_encoder_->forward(context));
  at::Tensor h = at::silu(input_->forward(at::cat({x_t, temb, c.to(x_t.scalar_type())}, 1)));
  for (std::size_t i = 0; i < blocks_->size(); ++i)
    h = run_block(block_name(i), *blocks_[i], block_fns_[i], h);
  at::Tensor eps = output_->forward(h);
  if (o.skip) eps = eps + (1 - alphas_cumprod_.index_select(0, t)).sqrt().to(x_t.scalar_type()).unsqueeze(1) * x_t;
  return eps;
}

at::Tensor DdpmImpl::q_sample(const at::Tensor& x0, const at::Tensor& t, const at::Tensor& noise) const {
  std::vector<std::int64_t> shape(static_cast<std::size_t>(x0.dim()), 1);
  shape[0] = x0.size(0);
  const at::Tensor ab = alphas_cumprod_.index_select(0, t).to(x0.scalar_type()).view(shape);
  return ab.sqrt() * x0 + (1 - ab).sqrt() * noise;
}

std::vector<std::string> DdpmImpl::checkpoint_blocks() const {
  std::vector<std::string> names;
  for (std::size_t i = 0; i < blocks_->size(); ++i) names.push_back(fmt::format("blocks.{}", i));
  return names;
}

at::Tensor DdpmImpl::sample(const at::Tensor& context, const PredictOptions& options) {
  const auto& o = options_;
  BELLOWS_CHECK_DATA(context.dim() == 2 && context.size(1) == o.context_features,
                     fmt::format("the contexts have shape {}, the model expects [rows, {}] (model.context_features)",
                                 shape_of(context.sizes()), o.context_features),
                     "give one row of context values per sample, as in training");
  BELLOWS_CHECK_USAGE(options.samples >= 1, fmt::format("samples is {}, expected >= 1", options.samples),
                      "ask for at least one sample");
  BELLOWS_CHECK_USAGE(options.steps >= 0 && options.steps <= o.steps,
                      fmt::format("sampling steps {} outside [0, {}] (the model's T)", options.steps, o.steps),
                      "use 0 for the full ancestral sampler, or 1..T for DDIM");
  BELLOWS_CHECK_USAGE(options.eta >= 0 && options.eta <= 1, fmt::format("eta {} outside [0, 1]", options.eta),
                      "use eta 0 (deterministic DDIM) to 1 (as much noise as the ancestral sampler)");
  torch::NoGradGuard no_grad;
  const at::TensorOptions to = output_->weight.options();
  const std::int64_t rows = context.size(0), n = options.samples, width = o.out_features;
  const at::Tensor cond = context.to(to).repeat_interleave(n, 0);  // row b*n + j: context b, draw j

  // Per-row random streams, drawn as float32 on the CPU (the same numbers whatever the device and dtype).
  std::vector<at::Generator> generators;
  generators.reserve(static_cast<std::size_t>(rows));
  for (std::int64_t b = 0; b < rows; ++b) {
    generators.push_back(at::make_generator<at::CPUGeneratorImpl>(
        data::mix_seed(options.seed, static_cast<std::uint64_t>(options.first_index + b))));
  }
  auto draw = [&] {
    std::vector<at::Tensor> parts;
    parts.reserve(generators.size());
    for (auto& g : generators) parts.push_back(at::randn({n, width}, g, at::TensorOptions().dtype(at::kFloat)));
    return (parts.empty() ? at::empty({0, width}, at::kFloat) : at::cat(parts)).to(to);
  };
  // The schedule as doubles, read once (one device sync), so each step's coefficients are scalars. Both samplers
  // read alphas_cumprod only (beta_t = 1 - ab_t / ab_{t-1}): with the betas buffer as well, the two buffers'
  // float32 roundings would disagree by ~1e-7, which 1 / sqrt(ab_t) amplifies at high t.
  const at::Tensor ab_t = alphas_cumprod_.to(at::kCPU, at::kDouble).contiguous();
  const std::vector<double> ab(ab_t.data_ptr<double>(), ab_t.data_ptr<double>() + o.steps);
  std::vector<double> beta(ab.size());
  for (std::size_t t = 0; t < ab.size(); ++t) beta[t] = 1 - ab[t] / (t == 0 ? 1.0 : ab[t - 1]);
  auto eps_at = [&](const at::Tensor& x, std::int64_t t) {
    return forward(x, at::full({x.size(0)}, t, to.dtype(at::kLong)), cond);
  };

  at::Tensor x = draw();
  if (options.steps == 0) {
    // --- ancestral DDPM: x_{t-1} = (x_t - beta_t / sqrt(1 - ab_t) eps) / sqrt(1 - beta_t) + sqrt(beta~_t) z ---
    for (std::int64_t t = o.steps - 1; t >= 0; --t) {
      const at::Tensor eps = eps_at(x, t);
      x = (x - (beta[t] / std::sqrt(1 - ab[t])) * eps) / std::sqrt(1 - beta[t]);
      if (t > 0) x = x + std::sqrt(beta[t] * (1 - ab[t - 1]) / (1 - ab[t])) * draw();
    }
  } else {
    // --- DDIM over S trailing timesteps: tau_k = round((S - k) T / S) - 1, from T-1 down ---
    const std::int64_t s = options.steps;
    std::vector<std::int64_t> taus;
    for (std::int64_t k = 0; k < s; ++k) taus.push_back(std::llround(double(s - k) * double(o.steps) / double(s)) - 1);
    for (std::size_t k = 0; k < taus.size(); ++k) {
      const std::int64_t t = taus[k];
      const bool last = k + 1 == taus.size();
      const double ab_prev = last ? 1.0 : ab[taus[k + 1]];
      const at::Tensor eps = eps_at(x, t);
      const at::Tensor x0 = (x - std::sqrt(1 - ab[t]) * eps) / std::sqrt(ab[t]);
      const double sigma = options.eta * std::sqrt((1 - ab_prev) / (1 - ab[t]) * (1 - ab[t] / ab_prev));
      x = std::sqrt(ab_prev) * x0 + std::sqrt(std::max(0.0, 1 - ab_prev - sigma * sigma)) * eps;
      if (!last && sigma > 0) x = x + sigma * draw();
    }
  }
  return n == 1 ? x.view({rows, width}) : x.view({rows, n, width});
}

namespace {

class DdpmTask final : public Task {
 public:
  StepOutput step(torch::nn::Module& model, const data::Batch& batch) override {
    DdpmImpl& m = ddpm(model);
    const at::Tensor& context = batch.at("x");
    at::Tensor x0 = batch.at("y");
    if (!at::isFloatingType(x0.scalar_type())) x0 = x0.to(at::kFloat);
    const at::Tensor t = at::randint(0, m.options().steps, {x0.size(0)}, x0.options().dtype(at::kLong));
    const at::Tensor noise = at::randn_like(x0);
    const at::Tensor pred = m.forward(m.q_sample(x0, t, noise), t, context);
    const auto dtype = at::promote_types(pred.scalar_type(), at::kFloat);  // fp32 loss under autocast; fp64 stays
    StepOutput out;
    out.loss = (pred.to(dtype) - noise.to(dtype)).square().mean();
    return out;
  }
  // Samples x_0 for the contexts "x": [B, O], or [B, N, O] for N > 1 samples (see DdpmImpl::sample).
  at::Tensor predict(torch::nn::Module& model, const data::Batch& batch, const PredictOptions& options) override {
    return ddpm(model).sample(batch.at("x"), options);
  }

 private:
  static DdpmImpl& ddpm(torch::nn::Module& model) {
    auto* m = dynamic_cast<DdpmImpl*>(&model);
    BELLOWS_CHECK(m != nullptr, fmt::format("the ddpm task got a {} module", model.name()),
                  "pair make_ddpm_task() with a DdpmImpl");
    return *m;
  }
};

// The data's widths against the model's, before any step (a clear error rather than a shape mismatch).
void check_data_widths(const DdpmOptions& o, const data::Dataset& train) {
  if (train.size() == 0) return;
  const data::Batch one = data::first_sample(train);
  BELLOWS_CHECK_CONFIG(one.tensors.count("x") > 0,
                       fmt::format("the ddpm needs inputs 'x' (the context values), {} has none", train.name()),
                       "name the context array x");
  const at::Tensor& x = one.at("x");
  BELLOWS_CHECK_DATA(at::isFloatingType(x.scalar_type()),
                     fmt::format("the ddpm's inputs 'x' are {} in {}, expected floating point", c10::toString(x.scalar_type()), train.name()),
                     "give the context values as float32 or float64");
  BELLOWS_CHECK_CONFIG(
      x.dim() == 2 && x.size(1) == o.context_features,
      fmt::format("model.context_features is {} but the data's inputs 'x' have shape {} per sample ({})",
                  o.context_features, shape_of(x.sizes().slice(1)), train.name()),
      "set model.context_features to the number of context values per sample");
  BELLOWS_CHECK_CONFIG(one.tensors.count("y") > 0,
                       fmt::format("the ddpm needs targets 'y' (the fine values), {} has none", train.name()),
                       "name the fine-value array with data.npy.y");
  const at::Tensor& y = one.at("y");
  BELLOWS_CHECK_DATA(at::isFloatingType(y.scalar_type()),
                     fmt::format("the ddpm's targets 'y' are {} in {}, expected floating point", c10::toString(y.scalar_type()), train.name()),
                     "give the fine values as float32 or float64");
  BELLOWS_CHECK_CONFIG(y.dim() == 2 && y.size(1) == o.out_features,
                       fmt::format("model.out_features is {} but the data's targets 'y' have shape {} per sample ({})",
                                   o.out_features, shape_of(y.sizes().slice(1)), train.name()),
                       "set model.out_features to the number of fine values per sample");
}

// The model.* keys of DdpmOptions, bound once (config/binding.h).
const config::Binding<DdpmOptions>& ddpm_binding() {
  using O = DdpmOptions;
  return config::bound<O>("model.", [](config::Binding<O>& b) {
    b.key("context_features", &O::context_features, "conditioning values per sample (inputs 'x')").min(1);
    b.key("out_features", &O::out_features, "generated values per sample (targets 'y')").min(1);
    b.key("hidden", &O::hidden, "width of the context embedding and the denoiser").min(1);
    b.key("layers", &O::layers, "denoiser hidden layers (the input layer, then residual blocks)").min(1);
    b.key("time_embedding", &O::time_embedding, "sinusoidal timestep features (even)").min(2);
    b.key("steps", &O::steps, "diffusion steps T").min(1);
    b.key("schedule", &O::schedule, "noise schedule").choices({"linear", "cosine"});
    b.key("skip", &O::skip, "add sqrt(1 - alpha_bar_t) x_t, the linear noise estimate, to the denoiser's output (unit-scale targets)");
  });
}

ModelEntry ddpm_entry() {
  ModelEntry e;
  e.name = "ddpm";
  e.help = "conditional denoising diffusion model: context vectors -> generated vectors (W5, seed 002)";
  // The model's defaults (7 context values -> 256 generated) are fast; the data is made to their widths.
  e.demo.yaml = R"(data:
  source: synthetic
  kind: regression
  samples: 4096
  features: 7
  targets: 256
  batch_size: 256
  val_fraction: 0.1
model:
  name: ddpm
)";
  e.demo.data =
      "a synthetic regression table (7 context values -> 256 values of a random teacher network, 4096 samples)";
  e.add_keys = [](config::Schema& s) { ddpm_binding().declare(s); };
  e.io = [](const config::Config& c) {
    const DdpmOptions o = ddpm_binding().read(c);
    return ModelIo{std::nullopt, o.out_features, o.context_features, std::nullopt};
  };
  e.forward_flops = [](const config::Config& c, const ModelContext&) -> std::optional<double> {
    const DdpmOptions o = ddpm_binding().read(c);
    const std::int64_t context = o.context_features, out = o.out_features, h = o.hidden, layers = o.layers, embedding = o.time_embedding;
    return linear_flops(1, context, h) + linear_flops(1, out + embedding + h, h) + static_cast<double>(layers - 1) * linear_flops(1, h, h) +
           linear_flops(1, h, out);
  };
  e.check_data = [](const config::Config& c, const data::Dataset& train) { check_data_widths(ddpm_binding().read(c), train); };
  e.build = [](const config::Config& c, const ModelContext& context) {
    const DdpmOptions o = ddpm_binding().read(c);
    if (context.train) check_data_widths(o, *context.train);
    return BuiltModel{std::make_shared<DdpmImpl>(o), make_ddpm_task()};
  };
  return e;
}

const ModelRegistrar kDdpmRegistered(ddpm_entry());

}  // namespace

std::shared_ptr<Task> make_ddpm_task() {
  return std::make_shared<DdpmTask>();
}

}  // namespace bellows::models
