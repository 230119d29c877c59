// The check-macro family: kinds, messages, hints and source locations survive into the thrown Error.
#include <gtest/gtest.h>

#include "bellows/util/check.h"
#include "bellows/util/suggest.h"

namespace bellows {
namespace {

TEST(Check, PassingConditionDoesNotThrowOrEvaluateMessage) {
  int built = 0;
  auto message = [&] { ++built; return std::string("never"); };
  EXPECT_NO_THROW(BELLOWS_CHECK_CONFIG(1 + 1 == 2, message(), "hint"));
  EXPECT_EQ(built, 0);
}

TEST(Check, FailingConditionCarriesKindMessageHintAndLocation) {
  try {
    BELLOWS_CHECK_DATA(false, "row 7 of a.csv has 3 columns, expected 4", "fix the row");
    FAIL() << "no exception";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kData);
    EXPECT_EQ(e.message(), "row 7 of a.csv has 3 columns, expected 4");
    EXPECT_EQ(e.hint(), "fix the row");
    EXPECT_STREQ(e.file(), "error_test.cpp");
    EXPECT_GT(e.line(), 0u);
    const std::string what = e.what();
    EXPECT_NE(what.find("row 7 of a.csv"), std::string::npos);
    EXPECT_NE(what.find("---> HINT: fix the row"), std::string::npos);
    EXPECT_NE(what.find("error_test.cpp:"), std::string::npos);
  }
}

TEST(Check, EachMacroRaisesItsKind) {
  auto kind_of = [](auto&& fn) {
    try {
      fn();
    } catch (const Error& e) {
      return e.kind();
    }
    return ErrorKind::kInterrupted;  // not thrown: a value none of the cases below uses
  };
  EXPECT_EQ(kind_of([] { BELLOWS_CHECK(false, "m", "h"); }), ErrorKind::kInternal);
  EXPECT_EQ(kind_of([] { BELLOWS_CHECK_USAGE(false, "m", "h"); }), ErrorKind::kUsage);
  EXPECT_EQ(kind_of([] { BELLOWS_CHECK_CONFIG(false, "m", "h"); }), ErrorKind::kConfig);
  EXPECT_EQ(kind_of([] { BELLOWS_CHECK_RESOURCE(false, "m", "h"); }), ErrorKind::kResource);
  EXPECT_EQ(kind_of([] { BELLOWS_FAIL(ErrorKind::kData, "m", "h"); }), ErrorKind::kData);
}

TEST(Suggest, EditDistance) {
  EXPECT_EQ(edit_distance("", ""), 0u);
  EXPECT_EQ(edit_distance("abc", ""), 3u);
  EXPECT_EQ(edit_distance("kitten", "sitting"), 3u);
  EXPECT_EQ(edit_distance("--jsn", "--json"), 1u);
}

TEST(Suggest, ClosestMatch) {
  const std::vector<std::string> commands = {"hw", "train", "plan", "bench", "doctor"};
  EXPECT_EQ(closest_match("trian", commands), "train");
  EXPECT_EQ(closest_match("hx", commands), "hw");
  EXPECT_EQ(closest_match("doc", commands), "doctor");  // a prefix
  EXPECT_EQ(closest_match("frobnicate", commands), std::nullopt);
  EXPECT_EQ(closest_match("--jsn", {"--json", "--measure", "--help"}), "--json");
}

}  // namespace
}  // namespace bellows
