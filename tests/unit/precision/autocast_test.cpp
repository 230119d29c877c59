// AutocastGuard: a matmul inside a bf16 guard on the CPU is bf16 and fp32 outside; nesting restores each level;
// the cast cache lives until the outermost guard exits; the state is per thread; bad dtypes are refused.
#include "bellows/precision/autocast.h"

#include <ATen/ATen.h>
#include <ATen/autocast_mode.h>
#include <ATen/core/grad_mode.h>
#include <gtest/gtest.h>

#include <thread>

#include "bellows/util/error.h"

namespace bellows::precision {
namespace {

bool cpu_enabled() {
  return at::autocast::is_autocast_enabled(at::kCPU);
}
c10::ScalarType cpu_dtype() {
  return at::autocast::get_autocast_dtype(at::kCPU);
}

TEST(AutocastGuard, MatmulInsideBf16GuardIsBf16AndFp32Outside) {
  const at::Tensor a = at::rand({4, 8});
  const at::Tensor b = at::rand({8, 3});
  EXPECT_EQ(at::matmul(a, b).scalar_type(), at::kFloat);
  {
    AutocastGuard guard(at::kCPU, at::kBFloat16);
    EXPECT_EQ(at::matmul(a, b).scalar_type(), at::kBFloat16);
  }
  EXPECT_EQ(at::matmul(a, b).scalar_type(), at::kFloat);
}

TEST(AutocastGuard, NestingRestoresEachLevel) {
  ASSERT_FALSE(cpu_enabled());
  const c10::ScalarType original = cpu_dtype();
  const at::Tensor a = at::rand({2, 2});
  {
    AutocastGuard outer(at::kCPU, at::kBFloat16);
    EXPECT_TRUE(cpu_enabled());
    EXPECT_EQ(cpu_dtype(), at::kBFloat16);
    {
      AutocastGuard inner(at::kCPU, at::kHalf);
      EXPECT_EQ(cpu_dtype(), at::kHalf);
      EXPECT_EQ(at::mm(a, a).scalar_type(), at::kHalf);
      {
        AutocastGuard fp32_region(at::kCPU, at::kFloat, /*enabled=*/false);
        EXPECT_FALSE(cpu_enabled());
        EXPECT_EQ(at::mm(a, a).scalar_type(), at::kFloat);
      }
      EXPECT_TRUE(cpu_enabled());
      EXPECT_EQ(cpu_dtype(), at::kHalf);
    }
    EXPECT_TRUE(cpu_enabled());
    EXPECT_EQ(cpu_dtype(), at::kBFloat16);
    EXPECT_EQ(at::mm(a, a).scalar_type(), at::kBFloat16);
  }
  EXPECT_FALSE(cpu_enabled());
  EXPECT_EQ(cpu_dtype(), original);
}

// Autocast caches the low-precision copy of a leaf weight that requires grad. Changing the weight in place
// makes a stale cache visible: the copy must survive an inner guard's exit and be gone after the outermost's.
TEST(AutocastGuard, CastCacheClearedOnlyWhenOutermostExits) {
  const at::Tensor x = at::ones({1, 2});
  at::Tensor w = at::ones({2, 2}).requires_grad_(true);
  auto set_weight = [&](double v) {
    at::NoGradGuard no_grad;
    w.fill_(v);
  };
  {
    AutocastGuard outer(at::kCPU, at::kBFloat16);
    EXPECT_EQ(at::mm(x, w).sum().item<float>(), 4.0f);  // caches bf16(w) = ones
    set_weight(2.0);
    {
      AutocastGuard inner(at::kCPU, at::kBFloat16);
      EXPECT_EQ(at::mm(x, w).sum().item<float>(), 4.0f);  // stale copy: the cache is shared with the inner guard
    }
    EXPECT_EQ(at::mm(x, w).sum().item<float>(), 4.0f);  // inner exit did not clear it
  }
  AutocastGuard again(at::kCPU, at::kBFloat16);
  EXPECT_EQ(at::mm(x, w).sum().item<float>(), 8.0f);  // outermost exit cleared it: cast afresh
}

TEST(AutocastGuard, StateIsPerThread) {
  AutocastGuard guard(at::kCPU, at::kBFloat16);
  ASSERT_TRUE(cpu_enabled());
  bool other_enabled = true;
  c10::ScalarType other_result = at::kBFloat16;
  std::thread other([&] {
    other_enabled = cpu_enabled();
    other_result = at::mm(at::rand({2, 2}), at::rand({2, 2})).scalar_type();
  });
  other.join();
  EXPECT_FALSE(other_enabled);
  EXPECT_EQ(other_result, at::kFloat);
}

TEST(AutocastGuard, UnsupportedDtypeIsConfigErrorAndChangesNothing) {
  const c10::ScalarType before = cpu_dtype();
  try {
    AutocastGuard guard(at::kCPU, at::kDouble);
    FAIL() << "a float64 autocast guard was accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kConfig);
  }
  EXPECT_FALSE(cpu_enabled());
  EXPECT_EQ(cpu_dtype(), before);
  // A disabled guard does not look at the dtype.
  EXPECT_NO_THROW(AutocastGuard(at::kCPU, at::kDouble, /*enabled=*/false));
}

}  // namespace
}  // namespace bellows::precision
