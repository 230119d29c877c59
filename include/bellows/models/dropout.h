// Dropout whose masks are drawn in parallel on the CPU. ATen's CPU dropout draws its Bernoulli mask one element
// at a time from the mt19937 generator (MKL's parallel path is taken on Intel CPUs only): on W3 that was 25% of a
// training step on 2 AMD cores (234 ms of 940 ms, profiled). Here elements 2k and 2k+1 are kept when the low and
// high 32 bits of SplitMix64(seed + (k + 1) * golden), as uniforms in [0, 1) with 24 bits, are below 1 - p: any
// range of elements can be filled by any thread, so the mask is the same whatever the thread count. The seed is
// one draw from the default CPU generator, so torch::manual_seed reproduces a run and activation checkpointing
// (which restores the generator) replays the same masks. The masks are statistically those of at::dropout (keep
// probability 1 - p, kept values scaled by 1 / (1 - p)) but not the same draws: DropoutMasks::kTorch uses
// at::dropout itself (bench/peers/check.py compares losses with PyTorch that way). Written here because ATen has
// no parallel CPU Bernoulli outside MKL-on-Intel; ATen's Philox engine, tried first, filled masks no faster than
// mt19937 (5 ns an element).
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <optional>

namespace bellows::models {

enum class DropoutMasks {
  kParallel,  // Philox masks filled in parallel on the CPU; at::dropout on other devices (CUDA's is already parallel)
  kTorch,     // at::dropout everywhere: PyTorch's own draws, bit for bit
};

// Process-wide, like ATen's own flags; set by the run from the `dropout_masks` key (plan::apply), default kParallel.
void set_dropout_masks(DropoutMasks masks);
DropoutMasks dropout_masks();

// at::dropout(x, p, train) with the masks chosen above. p in [0, 1); train false or p 0: x itself.
at::Tensor dropout(const at::Tensor& x, double p, bool train);

// at::scaled_dot_product_attention(q, k, v, mask, p, causal, scale) whose attention dropout, on the CPU with the
// parallel masks, is drawn above: SDPA's math path softmax(q k^T * scale + mask) v, written out (what ATen runs on
// the CPU when dropout is on, with a bool mask as -inf where false, a float mask added, rows with nothing to attend
// to 0 as ATen's safe softmax makes them). Otherwise (p 0, kTorch, another device, grouped-query heads)
// at::scaled_dot_product_attention itself.
at::Tensor scaled_dot_product_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                        const std::optional<at::Tensor>& mask, double p, bool causal = false,
                                        std::optional<double> scale = std::nullopt, bool enable_gqa = false);

// The mask alone, on the CPU: 1 / (1 - p) (scaled) or 1 where kept, 0 where dropped, from `seed`; options: its
// floating dtype. The same for any thread count.
at::Tensor parallel_dropout_mask(at::IntArrayRef sizes, double p, std::uint64_t seed, const at::TensorOptions& options,
                                 bool scaled = true);

}  // namespace bellows::models
