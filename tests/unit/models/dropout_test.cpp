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

}  // namespace
}  // namespace bellows::models
