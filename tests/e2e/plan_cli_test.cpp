// `bellows plan`, `bellows train --plan` and `bellows bench --matrix` from the command line: exit codes, the files
// they write, and the plan row of a run that used a tuned plan.
#include <gtest/gtest.h>
#include <stdlib.h>

#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "run_cli.h"

namespace bellows::testing {
namespace {
namespace fs = std::filesystem;

// docs/planning.md: Ctrl-C during the baseline writes nothing (it wrote a plan whose winner was the configured
// settings when the baseline had measured enough steps, issue 32).
TEST(PlanCli, InterruptedDuringTheBaselineWritesNothing) {
  const fs::path dir = scratch_dir("plan_cli_interrupted");
  fs::create_directories(dir / "tmp");
  const auto baseline_logged = [&] {  // the baseline trial's run directory, under TMPDIR, has a step record
    std::error_code ec;
    for (const auto& e : fs::directory_iterator(dir / "tmp", ec)) {
      if (has_record(e.path() / "trial-0" / "metrics.jsonl")) return true;
    }
    return false;
  };
  const CliResult r = run_cli_signalled_when("plan data.samples=4096 --budget 120s --trial-seconds 5 --out '" + (dir / "p.json").string() + "'",
                                             baseline_logged, SIGINT, 300,
                                             "TMPDIR='" + (dir / "tmp").string() + "' BELLOWS_CACHE='" + (dir / "cache").string() + "'");
  EXPECT_EQ(r.code, 130) << r.err << r.out;
  EXPECT_NE(r.err.find("stopped by a signal during the baseline trial; no plan written"), std::string::npos) << r.err;
  EXPECT_FALSE(fs::exists(dir / "p.json"));
  EXPECT_FALSE(fs::exists(dir / "cache" / "plans"));
}

TEST(PlanCli, TunesWritesAPlanThatTrainUses) {
  const fs::path dir = scratch_dir("plan_cli");
  const std::string cache = "BELLOWS_CACHE='" + (dir / "cache").string() + "'";
  const CliResult plan = run_cli("plan data.samples=4096 --budget 6s --trial-seconds 0.5 --out '" + (dir / "p.json").string() + "'", "env " + cache);
  ASSERT_EQ(plan.code, 0) << plan.err << plan.out;
  EXPECT_NE(plan.out.find("bellows plan: demo on"), std::string::npos) << plan.out;
  EXPECT_NE(plan.out.find("baseline"), std::string::npos) << plan.out;
  EXPECT_NE(plan.out.find("plan written to"), std::string::npos) << plan.out;
  EXPECT_NE(plan.err.find("plan: trial 'baseline'"), std::string::npos) << plan.err;
  const nlohmann::json j = nlohmann::json::parse(slurp(dir / "p.json"));
  EXPECT_EQ(j["format"], "bellows-tuned-plan");
  EXPECT_GE(j["trials"].size(), 1u);
  // Cached for --plan auto under the config's and machine's keys.
  ASSERT_TRUE(fs::exists(dir / "cache" / "plans"));
  EXPECT_EQ(std::distance(fs::directory_iterator(dir / "cache" / "plans"), fs::directory_iterator{}), 1);

  const CliResult train = run_cli("train data.samples=4096 train.max_steps=3 --output-dir '" + (dir / "runs").string() + "' --plan '" +
                                  (dir / "p.json").string() + "'");
  ASSERT_EQ(train.code, 0) << train.err;
  const nlohmann::json run_plan = nlohmann::json::parse(slurp(dir / "runs" / "demo" / "plan.json"));
  bool tuned_row = false;
  for (const auto& e : run_plan["entries"]) {
    if (e["key"] == "tuned") {
      tuned_row = true;
      EXPECT_NE(e["reason"].get<std::string>().find("from " + (dir / "p.json").string()), std::string::npos) << e.dump();
      EXPECT_EQ(e["reason"].get<std::string>().find("WARNING"), std::string::npos) << "the same config on the same machine: " << e.dump();
    }
  }
  EXPECT_TRUE(tuned_row) << run_plan.dump(1);
  // The cached plan serves --plan auto without tuning again (no trial lines).
  const CliResult autorun = run_cli("train data.samples=4096 train.max_steps=3 --output-dir '" + (dir / "runs2").string() + "' --plan auto",
                                    "env " + cache);
  ASSERT_EQ(autorun.code, 0) << autorun.err;
  EXPECT_EQ(autorun.err.find("plan: trial"), std::string::npos) << autorun.err;
  EXPECT_NE(autorun.out.find("cached plan"), std::string::npos) << autorun.out;
}

TEST(PlanCli, BenchMatrixWritesTableJsonAndCharts) {
  const fs::path dir = scratch_dir("matrix_cli");
  const CliResult r = run_cli("bench data.samples=2048 precision=fp32 --matrix --rounds 1 --trial-seconds 0.1 --out '" + (dir / "m").string() + "'");
  ASSERT_EQ(r.code, 0) << r.err << r.out;
  EXPECT_NE(r.out.find("bellows bench --matrix: demo"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("optim.implementation=foreach"), std::string::npos) << r.out;
  for (const char* f : {"matrix.json", "matrix.svg", "matrix.png"}) EXPECT_GT(fs::file_size(dir / "m" / f), 100u) << f;
  const nlohmann::json j = nlohmann::json::parse(slurp(dir / "m" / "matrix.json"));
  EXPECT_EQ(j["rounds"], 1);
  EXPECT_GT(j["baseline"]["samples_per_s"]["median"].get<double>(), 0);
}

}  // namespace
}  // namespace bellows::testing
