// Tuned plans as a config's input (app/tuned_plan.h): files that are not tuned plans, not JSON, or hold a malformed
// override are config errors naming the file; a plan's unknown key is caught when the plan is applied. (The tuner that
// writes plans, and `--plan auto`, are tested in tests/unit/lab/tune_test.cpp.)
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "bellows/app/schema.h"
#include "bellows/app/tuned_plan.h"
#include "test_util.h"

namespace bellows::app {
namespace {
namespace fs = std::filesystem;

TEST(TunedPlan, BadFilesAreConfigErrorsNamingThem) {
  const test_support::TempDir tmp("tuned_bad");
  const fs::path& dir = tmp.path();
  auto error_for = [&](const std::string& name, const std::string& text) {
    std::ofstream(dir / name) << text;
    return test_support::error_from([&] { read_tuned_plan(dir / name); });
  };
  Error e = error_for("run-plan.json", R"({"device": "cpu", "precision": "fp32", "entries": []})");
  EXPECT_EQ(e.kind(), ErrorKind::kConfig);
  EXPECT_NE(e.message().find("run-plan.json is not a tuned plan"), std::string::npos) << e.message();
  e = error_for("broken.json", "{\"format\": ");
  EXPECT_NE(e.message().find("broken.json: not JSON"), std::string::npos) << e.message();
  e = error_for("bad-override.json", R"({"format": "bellows-tuned-plan", "version": 1, "overrides": ["threads"]})");
  EXPECT_NE(e.message().find("override 'threads' is not key=value"), std::string::npos) << e.message();
  std::ofstream(dir / "unknown-key.json") << R"({"format": "bellows-tuned-plan", "version": 1, "overrides": ["thread=2"]})";
  EXPECT_EQ(read_tuned_plan(dir / "unknown-key.json").overrides, std::vector<std::string>{"thread=2"}) << "read; its keys are checked when applied";
  e = test_support::error_from([&] { resolve_config(std::nullopt, {"--plan", (dir / "unknown-key.json").string()}); });
  EXPECT_EQ(e.kind(), ErrorKind::kConfig);
  EXPECT_NE(e.message().find("thread"), std::string::npos) << e.message();
  e = test_support::error_from([&] { resolve_config(std::nullopt, {"--plan", (dir / "missing.json").string()}); });
  EXPECT_NE(e.message().find("missing.json: cannot open it"), std::string::npos) << e.message();
  e = test_support::error_from([&] { resolve_config(std::nullopt, {"--plan"}); });
  EXPECT_EQ(e.kind(), ErrorKind::kUsage);
}

}  // namespace
}  // namespace bellows::app
