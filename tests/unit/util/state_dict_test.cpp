// StateDict helpers: scalars round-trip, prefixes nest and un-nest, missing keys name themselves.
#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <cmath>

#include "bellows/util/error.h"
#include "bellows/util/state_dict.h"

namespace bellows {
namespace {

TEST(StateDict, ScalarsRoundTrip) {
  StateDict d;
  put_int(d, "step", 1234567890123LL);
  put_double(d, "scale", 65536.5);
  EXPECT_EQ(get_int(d, "step"), 1234567890123LL);
  EXPECT_DOUBLE_EQ(get_double(d, "scale"), 65536.5);
  EXPECT_EQ(d.at("step").dtype(), at::kLong);
  EXPECT_EQ(d.at("scale").dim(), 0);
}

TEST(StateDict, PrefixesNestAndUnnest) {
  StateDict inner, outer;
  put_int(inner, "a", 1);
  inner["w"] = at::ones({2});
  merge_prefixed(outer, "optim", inner);
  put_int(outer, "optimizer", 7);  // shares the text prefix but not the "optim." prefix
  EXPECT_TRUE(contains(outer, "optim.a"));
  const StateDict back = sub_dict(outer, "optim");
  EXPECT_EQ(back.size(), 2u);
  EXPECT_EQ(get_int(back, "a"), 1);
  EXPECT_TRUE(back.at("w").equal(at::ones({2})));
}

// Found by fuzzing the checkpoint reader: a float where an integer belongs (NaN, 1e30) made LibTorch's conversion
// throw an internal error; whole floats are accepted, the rest are data errors naming the entry.
TEST(StateDict, AnIntegerEntryHoldingANonIntegerIsADataError) {
  StateDict d;
  put_double(d, "counters.step", 12.0);
  EXPECT_EQ(get_int(d, "counters.step"), 12);
  for (const double bad : {std::nan(""), 1e30, 2.5}) {
    put_double(d, "counters.step", bad);
    try {
      get_int(d, "counters.step");
      ADD_FAILURE() << bad << " was read as an integer";
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::kData);
      EXPECT_NE(e.message().find("state entry 'counters.step' holds"), std::string::npos) << e.message();
    }
  }
}

TEST(StateDict, MissingKeyNamesKeyAndKnownKeys) {
  StateDict d;
  put_int(d, "present", 1);
  try {
    get_int(d, "absent");
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kData);
    EXPECT_NE(e.message().find("'absent'"), std::string::npos);
    EXPECT_NE(e.message().find("present"), std::string::npos);
  }
  d["vec"] = at::ones({3});
  EXPECT_THROW(get_double(d, "vec"), Error);
}

}  // namespace
}  // namespace bellows
