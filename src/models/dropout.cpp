// Parallel dropout masks; see dropout.h.
#include "bellows/models/dropout.h"

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <ATen/Parallel.h>
#include <fmt/format.h>

#include <atomic>
#include <cmath>
#include <limits>
#include <mutex>

#include "bellows/util/check.h"

namespace bellows::models {
namespace {

std::atomic<DropoutMasks> g_masks{DropoutMasks::kParallel};

std::uint64_t seed_from_default_generator() {
  at::Generator gen = at::detail::getDefaultCPUGenerator();
  std::lock_guard<std::mutex> lock(gen.mutex());
  return gen.get<at::CPUGeneratorImpl>()->random64();
}

// SplitMix64's output function on the counter (Steele, Lea and Flood, "Fast splittable pseudorandom number
// generators", OOPSLA 2014: the generator of Java's SplittableRandom, whose stream passes BigCrush): 64 bits per
// pair of elements from a few multiplies and shifts, with no state carried from one pair to the next.
inline std::uint64_t splitmix64(std::uint64_t z) {
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
  return z ^ (z >> 31);
}

template <typename T>
void fill_mask(T* out, std::int64_t n, float keep, T kept_value, std::uint64_t seed) {
  constexpr std::uint64_t kGolden = 0x9E3779B97F4A7C15ULL;  // the Weyl increment
  constexpr float kTo01 = 1.0f / 16777216.0f;               // 24 bits to [0, 1)
  const std::int64_t pairs = (n + 1) / 2;
  at::parallel_for(0, pairs, 4096, [&](std::int64_t begin, std::int64_t end) {
    for (std::int64_t k = begin; k < end; ++k) {
      const std::uint64_t r = splitmix64(seed + static_cast<std::uint64_t>(k + 1) * kGolden);
      const std::int64_t j = 2 * k;
      out[j] = static_cast<float>(static_cast<std::uint32_t>(r) >> 8) * kTo01 < keep ? kept_value : T(0);
      if (j + 1 < n) out[j + 1] = static_cast<float>(static_cast<std::uint32_t>(r >> 32) >> 8) * kTo01 < keep ? kept_value : T(0);
    }
  });
}

}  // namespace

void set_dropout_masks(DropoutMasks masks) { g_masks = masks; }
DropoutMasks dropout_masks() { return g_masks; }

at::Tensor parallel_dropout_mask(at::IntArrayRef sizes, double p, std::uint64_t seed, const at::TensorOptions& options, bool scaled) {
  BELLOWS_CHECK_CONFIG(p >= 0 && p < 1, fmt::format("dropout probability {} outside [0, 1)", p), "use a probability in [0, 1)");
  at::Tensor mask = at::empty(sizes, options.device(at::kCPU));
  const auto keep = static_cast<float>(1.0 - p);
  const double scale = scaled ? 1.0 / (1.0 - p) : 1.0;
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kBFloat16, at::kHalf, mask.scalar_type(), "parallel_dropout_mask", [&] {
    fill_mask<scalar_t>(mask.data_ptr<scalar_t>(), mask.numel(), keep, static_cast<scalar_t>(scale), seed);
  });
  return mask;
}

at::Tensor dropout(const at::Tensor& x, double p, bool train) {
  if (!train || p == 0) return x;
  if (g_masks == DropoutMasks::kTorch || !x.device().is_cpu() || !at::isFloatingType(x.scalar_type())) return at::dropout(x, p, train);
  BELLOWS_CHECK_CONFIG(p > 0 && p < 1, fmt::format("dropout probability {} outside [0, 1)", p), "use a probability in [0, 1)");
  const std::uint64_t seed = seed_from_default_generator();
  if (x.scalar_type() == at::kFloat || x.scalar_type() == at::kDouble) {
    return x * parallel_dropout_mask(x.sizes(), p, seed, x.options());  // {0, 1/(1-p)}: one pass each way
  }
  // bf16/fp16: a {0, 1} mask, then the scale, as at::dropout's `input * mask * scale` (a mask of scaled values
  // would round 1/(1-p) in the mask's dtype before the product as well).
  return (x * parallel_dropout_mask(x.sizes(), p, seed, x.options(), /*scaled=*/false)).mul_(1.0 / (1.0 - p));
}

at::Tensor scaled_dot_product_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                        const std::optional<at::Tensor>& mask, double p, bool causal, std::optional<double> scale,
                                        bool enable_gqa) {
  if (p <= 0 || g_masks == DropoutMasks::kTorch || !q.device().is_cpu() || enable_gqa || q.is_nested()) {
    return at::scaled_dot_product_attention(q, k, v, mask, p, causal, scale, enable_gqa);
  }
  const double s = scale ? *scale : 1.0 / std::sqrt(static_cast<double>(q.size(-1)));
  at::Tensor scores = at::matmul(q, k.transpose(-2, -1)) * s;
  const double inf = std::numeric_limits<double>::infinity();
  if (causal) {
    const at::Tensor keep = at::ones({q.size(-2), k.size(-2)}, q.options().dtype(at::kBool)).tril();
    scores = scores.masked_fill(keep.logical_not(), -inf);
  }
  if (mask) scores = mask->scalar_type() == at::kBool ? scores.masked_fill(mask->logical_not(), -inf) : scores + *mask;
  const at::Tensor weights = mask || causal ? at::_safe_softmax(scores, -1) : at::softmax(scores, -1);
  return at::matmul(models::dropout(weights, p, true), v);
}

}  // namespace bellows::models
