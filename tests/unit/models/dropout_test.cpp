// The parallel dropout masks: the keep fraction and scale of at::dropout, the same mask whatever the thread count,
// reproducible from the default generator's seed, gradients through the mask, reduced precision, and the switch
// to PyTorch's own draws.
#include "bellows/models/dropout.h"

#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <gtest/gtest.h>
#include <torch/torch.h>

#include "bellows/util/error.h"

namespace bellows::models {
namespace {

struct RestoreMasks {
  DropoutMasks saved = dropout_masks();
  ~RestoreMasks() { set_dropout_masks(saved); }
};

TEST(Dropout, KeepsOneMinusPScaledAndTheSameForAnyThreadCount) {
  const int threads = at::get_num_threads();
  at::set_num_threads(1);
  const at::Tensor one = parallel_dropout_mask({1000, 1001}, 0.3, 42, at::kFloat);
  at::set_num_threads(2);
  const at::Tensor two = parallel_dropout_mask({1000, 1001}, 0.3, 42, at::kFloat);
  at::set_num_threads(threads);
  EXPECT_TRUE(one.equal(two));
  const double kept = one.ne(0).to(at::kDouble).mean().item<double>();
  EXPECT_NEAR(kept, 0.7, 0.003);  // 1,001,000 draws: the standard error is 0.00046
  EXPECT_TRUE(one.masked_select(one.ne(0)).eq(static_cast<float>(1.0 / 0.7)).all().item<bool>());
  EXPECT_FALSE(one.equal(parallel_dropout_mask({1000, 1001}, 0.3, 43, at::kFloat))) << "another seed, another mask";
  // Neighbouring elements are not correlated (the two halves of one SplitMix64 output, and the pairs).
  const at::Tensor k = one.ne(0).to(at::kDouble).flatten();
  const double corr = ((k.narrow(0, 0, k.numel() - 1) - 0.7) * (k.narrow(0, 1, k.numel() - 1) - 0.7)).mean().item<double>() / (0.7 * 0.3);
  EXPECT_LT(std::abs(corr), 0.01);
}

TEST(Dropout, ReproducibleUnderManualSeedWithGradientsThroughTheMask) {
  RestoreMasks restore;
  set_dropout_masks(DropoutMasks::kParallel);
  const at::Tensor x = at::randn({64, 33}).requires_grad_(true);
  torch::manual_seed(7);
  const at::Tensor a = models::dropout(x, 0.5, true);
  torch::manual_seed(7);
  const at::Tensor b = models::dropout(x, 0.5, true);
  EXPECT_TRUE(a.equal(b));
  EXPECT_FALSE(models::dropout(x, 0.5, true).equal(a)) << "the next call draws another seed";
  a.sum().backward();
  const at::Tensor mask = (a / x).detach();  // 0 or 2 where x != 0
  EXPECT_TRUE(x.grad().allclose(mask.nan_to_num(0), 0, 1e-6));
  EXPECT_TRUE(models::dropout(x, 0.5, false).equal(x)) << "evaluation: the identity";
  EXPECT_TRUE(models::dropout(x, 0.0, true).equal(x));
  EXPECT_THROW(models::dropout(x, 1.0, true), Error);
}

TEST(Dropout, ReducedPrecisionAndTorchMasksAreAtDropout) {
  RestoreMasks restore;
  set_dropout_masks(DropoutMasks::kParallel);
  const at::Tensor x = at::randn({256, 64}).to(at::kBFloat16);
  torch::manual_seed(3);
  const at::Tensor y = models::dropout(x, 0.1, true);
  EXPECT_EQ(y.scalar_type(), at::kBFloat16);
  const at::Tensor kept = y.ne(0) | x.eq(0);
  // Kept values are x / (1 - p) to bf16's precision: ATen rounds the scalar 1/(1 - p) to bf16 and then the
  // product, as at::dropout's `input * mask * scale` does (within 2^-7 relative).
  const at::Tensor got = y.masked_select(kept).to(at::kFloat), want = x.masked_select(kept).to(at::kFloat) * (1.0 / 0.9);
  EXPECT_TRUE(got.allclose(want, 1.0 / 128, 0));
  EXPECT_NEAR(y.ne(0).to(at::kDouble).mean().item<double>(), 0.9, 0.01);
  set_dropout_masks(DropoutMasks::kTorch);
  const at::Tensor z = at::randn({128, 32});
  torch::manual_seed(5);
  const at::Tensor ours = models::dropout(z, 0.2, true);
  torch::manual_seed(5);
  EXPECT_TRUE(ours.equal(at::dropout(z, 0.2, true)));
}

TEST(Dropout, AttentionWithParallelMasksIsAtensMathPath) {
  RestoreMasks restore;
  set_dropout_masks(DropoutMasks::kParallel);
  torch::manual_seed(2);
  const at::Tensor q = at::randn({2, 3, 5, 4}), k = at::randn({2, 3, 6, 4}), v = at::randn({2, 3, 6, 4});
  at::Tensor keys = at::ones({2, 1, 1, 6}, at::kBool);
  keys.index_put_({1, 0, 0, at::indexing::Slice(3)}, false);  // the second sequence's last 3 keys are padding
  const at::Tensor bias = at::randn({5, 6});
  // p = 1e-9 takes the parallel path and keeps every element (its 24-bit uniforms are all below 1 - 1e-9 in float,
  // and 1 / (1 - 1e-9) is 1 in float): the math path without dropout, against ATen's attention without dropout.
  const double p = 1e-9;
  EXPECT_TRUE(models::scaled_dot_product_attention(q, k, v, std::nullopt, p).allclose(at::scaled_dot_product_attention(q, k, v), 1e-5, 1e-6));
  EXPECT_TRUE(models::scaled_dot_product_attention(q, k, v, keys, p).allclose(at::scaled_dot_product_attention(q, k, v, keys), 1e-5, 1e-6));
  EXPECT_TRUE(models::scaled_dot_product_attention(q, k, v, bias, p, false, 0.3)
                  .allclose(at::scaled_dot_product_attention(q, k, v, bias, 0.0, false, 0.3), 1e-5, 1e-6));
  const at::Tensor kq = at::randn({2, 3, 5, 4}), vq = at::randn({2, 3, 5, 4});
  EXPECT_TRUE(models::scaled_dot_product_attention(q, kq, vq, std::nullopt, p, true)
                  .allclose(at::scaled_dot_product_attention(q, kq, vq, std::nullopt, 0.0, true), 1e-5, 1e-6));
  // A query with every key masked attends to nothing: 0, as ATen's safe softmax gives, not NaN.
  const at::Tensor none = at::zeros({2, 1, 1, 6}, at::kBool);
  EXPECT_TRUE(models::scaled_dot_product_attention(q, k, v, none, p).eq(0).all().item<bool>());
  // With dropout: about p of the attention weights dropped, the rest scaled by 1 / (1 - p); gradients flow.
  const at::Tensor qg = q.clone().requires_grad_(true);
  torch::manual_seed(4);
  const at::Tensor a = models::scaled_dot_product_attention(qg, k, v, keys, 0.5);
  torch::manual_seed(4);
  EXPECT_TRUE(a.equal(models::scaled_dot_product_attention(qg, k, v, keys, 0.5))) << "the same seed, the same masks";
  EXPECT_FALSE(a.allclose(at::scaled_dot_product_attention(q, k, v, keys), 1e-3, 1e-3));
  a.sum().backward();
  EXPECT_TRUE(qg.grad().defined() && qg.grad().isfinite().all().item<bool>());
  // dropout_masks: torch is ATen's attention, its draws bit for bit.
  set_dropout_masks(DropoutMasks::kTorch);
  torch::manual_seed(4);
  const at::Tensor ours = models::scaled_dot_product_attention(q, k, v, keys, 0.5);
  torch::manual_seed(4);
  EXPECT_TRUE(ours.equal(at::scaled_dot_product_attention(q, k, v, keys, 0.5)));
}

}  // namespace
}  // namespace bellows::models
