// A conditional denoising diffusion model (workload W5, seed 002: 7 coarse context values -> 256 fine values):
// a context encoder and an MLP denoiser that predicts the noise in x_t from x_t, a sinusoidal embedding of
// the timestep t and the context embedding; the noise schedule (betas, alphas_cumprod) lives in buffers, so it
// moves with the model and is saved with it. Sampling: ancestral DDPM over all T steps, or DDIM over fewer.
#pragma once

#include <ATen/core/Tensor.h>
#include <torch/nn/module.h>
#include <torch/nn/modules/container/modulelist.h>
#include <torch/nn/modules/linear.h>
#include <torch/nn/pimpl.h>

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "bellows/models/activation_checkpoint.h"  // defines: Checkpointable
#include "bellows/models/task.h"                   // defines: Task, PredictOptions

namespace bellows::models {

struct DdpmOptions {
  std::int64_t context_features = 7;  // conditioning values per sample (the coarse cell)
  std::int64_t out_features = 256;    // values generated per sample (the fine field)
  std::int64_t hidden = 256;          // width of the context embedding and of the denoiser
  std::int64_t layers = 2;            // denoiser hidden layers: the input layer, then layers-1 residual blocks
  std::int64_t time_embedding = 32;   // sinusoidal timestep features (even)
  std::int64_t steps = 50;            // T, diffusion steps
  std::string schedule = "linear";    // linear | cosine
  // Adds sqrt(1 - alpha_bar_t) x_t to the denoiser's output: the best linear estimate of the noise for data of
  // unit variance, so the network learns only the rest. Without it, an MLP denoiser with T = 50 (betas up to
  // 0.4) learns the near-identity map of high t too slowly and ancestral sampling diverges: on the example's
  // data (examples/icon-diffusion) a PyTorch replica trained 1500 steps sampled with RMSE 17 without the skip,
  // 0.28 with it. The skip assumes targets of about unit scale: standardise them.
  bool skip = true;
};

// The noise schedule as float64 betas [T]:
//   linear: Ho et al.'s betas 1e-4..0.02 for T = 1000, scaled by 1000/T (as Nichol & Dhariwal's
//           get_named_beta_schedule does; T = 50 gives 0.002..0.4), capped at 0.999 for T < 21;
//   cosine: Nichol & Dhariwal (2021): alpha_bar(t) = f(t)/f(0), f(t) = cos(((t/T + s)/(1 + s)) pi/2)^2,
//           s = 0.008; beta_t = min(1 - alpha_bar(t+1)/alpha_bar(t), 0.999).
// kConfig error for an unknown name or steps < 1.
at::Tensor make_betas(const std::string& schedule, std::int64_t steps);

// Parameters (hidden H, out O, context C, embedding E, L = layers):
//   context_encoder: Linear(C, H), SiLU
//   input:           Linear(O + E + H, H), SiLU    over [x_t, embed(t), context_encoder(c)]
//   blocks.i:        h = h + SiLU(Linear(H, H)(h)), i < L - 1 (checkpointable)
//   output:          Linear(H, O), plus sqrt(1 - alpha_bar_t) x_t with `skip`
// W5's defaults (C 7, O 256, H 256, L 2, E 32) have 273,152 parameters.
class DdpmImpl : public torch::nn::Module, public Checkpointable {
 public:
  explicit DdpmImpl(const DdpmOptions& options);

  // The predicted noise [B, O] in x_t [B, O] at timesteps t (int64 [B], in [0, T)) given the context [B, C].
  at::Tensor forward(const at::Tensor& x_t, const at::Tensor& t, const at::Tensor& context);

  // Forward noising q(x_t | x_0) = N(sqrt(alpha_bar_t) x_0, (1 - alpha_bar_t) I): sqrt(ab) x0 + sqrt(1-ab) noise.
  at::Tensor q_sample(const at::Tensor& x0, const at::Tensor& t, const at::Tensor& noise) const;

  // Samples x_0 given the context [B, C], under no-grad: [B, O] for options.samples == 1, else [B, N, O]
  // (batch-major: row b of the result belongs to row b of the context, so batches concatenate along dim 0).
  // options.steps 0: ancestral DDPM over all T steps (posterior variance beta~_t; eta unused); 1..T: DDIM over
  // that many timesteps ("trailing" spacing, so the first is T-1) with options.eta in [0, 1] (0: deterministic;
  // 1 with steps == T is the ancestral sampler again). The noise of context row b comes from its own CPU
  // generator seeded with data::mix_seed(options.seed, options.first_index + b) and is drawn as float32, so a
  // sample depends on the seed and its row's index only: not on the batch size, the device or the model's
  // dtype. kData errors for a context of the wrong shape, kUsage for samples < 1, steps outside [0, T] or eta
  // outside [0, 1].
  at::Tensor sample(const at::Tensor& context, const PredictOptions& options);

  // Timestep features [B, E]: [cos(t w_k), sin(t w_k)], w_k = 10000^(-k / (E/2)), k < E/2, in `dtype`.
  static at::Tensor timestep_embedding(const at::Tensor& t, std::int64_t dim, c10::ScalarType dtype);

  std::vector<std::string> checkpoint_blocks() const override;
  const DdpmOptions& options() const { return options_; }
  const at::Tensor& betas() const { return betas_; }
  const at::Tensor& alphas_cumprod() const { return alphas_cumprod_; }

 private:
  DdpmOptions options_;
  torch::nn::Linear context_encoder_{nullptr};
  torch::nn::Linear input_{nullptr};
  torch::nn::ModuleList blocks_{nullptr};
  // Each block's function, held for the model's lifetime: a checkpointed block runs it again in backward.
  std::vector<std::function<at::Tensor(const at::Tensor&)>> block_fns_;
  torch::nn::Linear output_{nullptr};
  at::Tensor betas_;           // [T], buffer "betas"
  at::Tensor alphas_cumprod_;  // [T], buffer "alphas_cumprod": prod_{s <= t} (1 - beta_s)
};
TORCH_MODULE(Ddpm);

// The training objective: per sample a uniform t in [0, T) and Gaussian noise; loss = MSE(predicted noise,
// noise) over batches with "x" = context [B, C] and "y" = x_0 [B, O]. predict() samples (see DdpmImpl::sample).
std::shared_ptr<Task> make_ddpm_task();

}  // namespace bellows::models
