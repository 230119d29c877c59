// The check-macro family: kinds, messages, hints and source locations survive into the thrown Error.
#include <ATen/ATen.h>
#include <gtest/gtest.h>
#include <torch/jit.h>

#include <new>

#include "bellows/util/check.h"
#include "bellows/util/exception_report.h"
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

// What the CLI and the C API report for an exception: out of memory, host or LibTorch's, is a resource error
// with a hint; LibTorch's other errors are one line; bellows errors keep their kind, hint and location.
TEST(ExceptionReport, OutOfMemoryIsAResourceErrorWithAHint) {
  const auto report_of = [](auto&& fn) {
    try {
      fn();
    } catch (...) {
      return report_current_exception();
    }
    return ExceptionReport{};
  };
  // A real allocation failure in LibTorch's CPU allocator (c10::OutOfMemoryError): 64 TiB of floats.
  const ExceptionReport torch_oom = report_of([] { at::empty({std::int64_t{1} << 44}, at::kFloat); });
  EXPECT_EQ(torch_oom.kind, ErrorKind::kResource) << torch_oom.message;
  EXPECT_TRUE(torch_oom.out_of_memory);
  EXPECT_EQ(torch_oom.message.rfind("out of memory: ", 0), 0u) << torch_oom.message;
  EXPECT_EQ(torch_oom.message.find('\n'), std::string::npos);
  EXPECT_EQ(torch_oom.hint, kOutOfMemoryHint);

  const ExceptionReport host_oom = report_of([] { throw std::bad_alloc(); });
  EXPECT_EQ(host_oom.kind, ErrorKind::kResource);
  EXPECT_TRUE(host_oom.out_of_memory);

  const ExceptionReport torch_error = report_of([] { at::ones({2}).view({3}); });
  EXPECT_EQ(torch_error.kind, ErrorKind::kInternal);
  EXPECT_FALSE(torch_error.out_of_memory);
  EXPECT_EQ(torch_error.message.rfind("LibTorch: ", 0), 0u) << torch_error.message;
  EXPECT_EQ(torch_error.message.find('\n'), std::string::npos) << torch_error.message;

  const ExceptionReport ours = report_of([] { BELLOWS_CHECK_DATA(false, "row 7 is short", "fix row 7"); });
  EXPECT_EQ(ours.kind, ErrorKind::kData);
  EXPECT_EQ(ours.message, "row 7 is short");
  EXPECT_EQ(ours.hint, "fix row 7");
  EXPECT_EQ(ours.location.rfind("error_test.cpp:", 0), 0u) << ours.location;

  const ExceptionReport other = report_of([] { throw std::runtime_error("something else"); });
  EXPECT_EQ(other.kind, ErrorKind::kInternal);
  EXPECT_EQ(other.message, "something else");
}

// Issue 44: the interpreter's error reached the user as its first line, "The following operation failed in the
// TorchScript interpreter.", and nothing else. It is reported as its error line and the source line that raised it.
TEST(ExceptionReport, AScriptedModelsErrorIsItsMessageAndSourceLine) {
  const auto unit = torch::jit::compile(R"JIT(
def widen(x: Tensor) -> Tensor:
    y = x * 2
    return y.view(3)
)JIT");
  try {
    unit->run_method("widen", at::ones({2}));
    FAIL() << "view(3) of 2 elements ran";
  } catch (const std::exception& e) {
    const std::string text = describe_libtorch_error(e);
    EXPECT_NE(text.find("shape '[3]' is invalid for input of size 2"), std::string::npos) << text;
    EXPECT_NE(text.find("line 4, in widen: return y.view(3)"), std::string::npos) << text;
    EXPECT_EQ(text.find('\n'), std::string::npos) << text;
    EXPECT_EQ(text.find("The following operation failed"), std::string::npos) << text;
    const ExceptionReport r = report_current_exception();
    EXPECT_EQ(r.kind, ErrorKind::kInternal);
    EXPECT_NE(r.message.find("return y.view(3)"), std::string::npos) << r.message;
  }
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
