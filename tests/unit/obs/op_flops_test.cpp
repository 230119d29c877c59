// The FLOP counter (obs/profile.h) on the ops LibTorch's profiler leaves at 0, counted by bellows' formulas
// (src/obs/op_flops.cpp): each through the counter on real ops, against a hand count, and the convolution formula
// against the profiler's own count of a 2-D convolution.
#include <ATen/ATen.h>
#include <ATen/core/grad_mode.h>  // defines: at::NoGradGuard
#include <gtest/gtest.h>

#include "bellows/obs/profile.h"

namespace bellows::obs {
namespace {

template <class F>
double counted_flops(F&& run) {
  FlopCounter counter;
  EXPECT_TRUE(counter.start());
  run();
  return counter.stop();
}

TEST(OpFlops, ConvolutionsOfEveryDimensionMatchTheHandCount) {
  at::NoGradGuard no_grad;
  // conv1d [4, 3, 64] * [16, 3, 5], padding 2: 64 outputs of 3 x 5 multiply-adds per output channel.
  EXPECT_DOUBLE_EQ(counted_flops([] { at::conv1d(at::randn({4, 3, 64}), at::randn({16, 3, 5}), at::randn({16}), 1, 2); }), 2.0 * 4 * 16 * 64 * 3 * 5);
  // Unbatched: a batch of one.
  EXPECT_DOUBLE_EQ(counted_flops([] { at::conv1d(at::randn({3, 64}), at::randn({16, 3, 5}), {}, 1, 2); }), 2.0 * 16 * 64 * 3 * 5);
  // Strided, dilated, grouped: length 20, kernel 3 at dilation 2 (span 5), stride 2, padding 1: (20 + 2 - 5) / 2 + 1
  // = 9 outputs; 2 groups: each output channel sees 4 / 2 input channels.
  EXPECT_DOUBLE_EQ(counted_flops([] { at::conv1d(at::randn({2, 4, 20}), at::randn({6, 2, 3}), {}, 2, 1, 2, 2); }), 2.0 * 2 * 6 * 9 * 2 * 3);
  // padding "same" is a string the formula cannot read: the convolution the call runs inside counts it, the same.
  EXPECT_DOUBLE_EQ(counted_flops([] { at::conv1d(at::randn({4, 3, 64}), at::randn({16, 3, 5}), {}, 1, "same"); }), 2.0 * 4 * 16 * 64 * 3 * 5);
  // conv3d [2, 2, 5, 6, 7] * [3, 2, 3, 3, 3]: 3 x 4 x 5 outputs.
  EXPECT_DOUBLE_EQ(counted_flops([] { at::conv3d(at::randn({2, 2, 5, 6, 7}), at::randn({3, 2, 3, 3, 3})); }), 2.0 * 2 * 3 * 60 * 2 * 27);
  // Transposed: every input element is scattered through C_out/groups x kernel weights. [2, 4, 10] through
  // [4, 3, 3] (C_in, C_out, k), stride 2; and 2-D with 2 groups, [1, 4, 5, 5] through [4, 3, 3, 3] (6 outputs).
  EXPECT_DOUBLE_EQ(counted_flops([] { at::conv_transpose1d(at::randn({2, 4, 10}), at::randn({4, 3, 3}), {}, 2); }), 2.0 * 2 * 10 * 4 * 3 * 3);
  EXPECT_DOUBLE_EQ(counted_flops([] { at::conv_transpose2d(at::randn({1, 4, 5, 5}), at::randn({4, 3, 3, 3}), {}, 1, 0, 0, 2); }),
                   2.0 * 25 * 4 * 3 * 9);
  // The profiler counts aten::conv2d itself (given a stride, padding and dilation per dimension; one value for all
  // it counts 0 and bellows' formula counts it); bellows' formula counts aten::convolution: the same.
  const at::Tensor x = at::randn({2, 4, 9, 9}), w = at::randn({6, 2, 3, 3});
  const double by_profiler = counted_flops([&] { at::conv2d(x, w, {}, {2, 2}, {1, 1}, {1, 1}, 2); });
  EXPECT_DOUBLE_EQ(by_profiler, 2.0 * 2 * 6 * 25 * 2 * 9);  // (9 + 2 - 3) / 2 + 1 = 5 per side
  EXPECT_DOUBLE_EQ(counted_flops([&] { at::convolution(x, w, {}, {2, 2}, {1, 1}, {1, 1}, false, {0, 0}, 2); }), by_profiler);
}

// A convolution's backward: one forward for each gradient it computes. The data's own gradient is not computed in
// a training step (the input needs none): the weight's alone, one forward's worth.
TEST(OpFlops, AConvolutionsBackwardCountsOneForwardPerGradient) {
  const double forward = 2.0 * 4 * 16 * 64 * 3 * 5;
  for (const bool input_grad : {false, true}) {
    const at::Tensor x = at::randn({4, 3, 64}).requires_grad_(input_grad);
    const at::Tensor w = at::randn({16, 3, 5}).requires_grad_();
    const at::Tensor y = at::conv1d(x, w, {}, 1, 2);
    const at::Tensor grad = at::ones_like(y);
    EXPECT_DOUBLE_EQ(counted_flops([&] { y.backward(grad); }), (input_grad ? 2 : 1) * forward) << "input grad " << input_grad;
  }
  // Transposed: the same rule on its forward's count.
  const at::Tensor x = at::randn({2, 4, 10}).requires_grad_();
  const at::Tensor w = at::randn({4, 3, 3}).requires_grad_();
  const at::Tensor y = at::conv_transpose1d(x, w, {}, 2);
  const at::Tensor grad = at::ones_like(y);
  EXPECT_DOUBLE_EQ(counted_flops([&] { y.backward(grad); }), 2 * 2.0 * 2 * 10 * 4 * 3 * 3);
}

TEST(OpFlops, ProductsAndAttentionTheProfilerMisses) {
  at::NoGradGuard no_grad;
  const at::Tensor m = at::randn({8, 16}), v = at::randn({16});
  EXPECT_DOUBLE_EQ(counted_flops([&] { at::mv(m, v); }), 2.0 * 8 * 16);
  EXPECT_DOUBLE_EQ(counted_flops([&] { at::addmv(at::randn({8}), m, v); }), 2.0 * 8 * 16);
  EXPECT_DOUBLE_EQ(counted_flops([&] { at::dot(v, v); }), 2.0 * 16);
  EXPECT_DOUBLE_EQ(counted_flops([&] { at::addbmm(at::randn({8, 5}), at::randn({3, 8, 16}), at::randn({3, 16, 5})); }), 2.0 * 3 * 8 * 16 * 5);
  EXPECT_DOUBLE_EQ(counted_flops([&] { at::randn({8, 5}).addmm_(m, at::randn({16, 5})); }), 2.0 * 8 * 16 * 5);
  // The fused attention kernel (on the CPU, flash attention): QK^T and the weights times V, [2, 4 heads, 8 queries,
  // 16] against 8 keys.
  const at::Tensor q = at::randn({2, 4, 8, 16});
  EXPECT_DOUBLE_EQ(counted_flops([&] { at::scaled_dot_product_attention(q, q, q); }), 2.0 * 2 * 4 * 8 * 8 * (16 + 16));
}

TEST(OpFlops, AttentionsBackwardIsTwiceItsForward) {
  // Three tensors: one used thrice would add its gradients up (elementwise additions the profiler counts).
  const at::Tensor q = at::randn({2, 4, 8, 16}).requires_grad_(), k = at::randn({2, 4, 8, 16}).requires_grad_();
  const at::Tensor v = at::randn({2, 4, 8, 16}).requires_grad_();
  const at::Tensor out = at::scaled_dot_product_attention(q, k, v);
  const at::Tensor grad = at::ones_like(out);
  EXPECT_DOUBLE_EQ(counted_flops([&] { out.backward(grad); }), 2 * 2.0 * 2 * 4 * 8 * 8 * (16 + 16));
}

}  // namespace
}  // namespace bellows::obs
