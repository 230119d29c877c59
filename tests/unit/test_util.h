// Helpers shared by the unit tests.
#pragma once

#include <ATen/core/Tensor.h>
#include <gtest/gtest.h>

#include <functional>
#include <vector>

#include "bellows/util/error.h"

namespace bellows::test_support {

// The bellows::Error that `fn` throws; a test failure when it throws none.
inline Error error_from(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const Error& e) {
    return e;
  }
  ADD_FAILURE() << "expected a bellows::Error, none was thrown";
  return Error(ErrorKind::kInternal, "<no error>", "");
}

// The values of a float32 tensor, in order.
inline std::vector<float> floats(const at::Tensor& t) {
  EXPECT_EQ(t.scalar_type(), at::kFloat);
  const at::Tensor c = t.contiguous();
  return {c.data_ptr<float>(), c.data_ptr<float>() + c.numel()};
}

}  // namespace bellows::test_support
