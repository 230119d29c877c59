// End-to-end: a pipeline of runs in one `bellows train`, the `checkpointing` key (named blocks, auto, and
// its errors), memory in the step records, and the profiler trace.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include <ATen/ATen.h>

#include "bellows/data/npy.h"
#include "run_cli.h"

namespace {

namespace fs = std::filesystem;
using Result = bellows::testing::CliResult;
using bellows::testing::slurp;

fs::path workflow_scratch() { return bellows::testing::scratch_dir("bellows_workflow"); }
Result workflow_run(const std::string& args) { return bellows::testing::run_cli(args, ""); }

fs::path workflow_write(const fs::path& dir, const std::string& name, const std::string& text) {
  std::ofstream(dir / name) << text;
  return dir / name;
}

std::vector<nlohmann::json> records(const fs::path& metrics, const std::string& type) {
  std::vector<nlohmann::json> out;
  std::ifstream in(metrics);
  for (std::string line; std::getline(in, line);) {
    auto j = nlohmann::json::parse(line);
    if (j["type"] == type) out.push_back(j);
  }
  return out;
}

const char* kStage = R"(data: {source: synthetic, kind: regression, samples: 1024, features: 8, batch_size: 64}
model: {name: mlp, in_features: 8, hidden: [32], out_features: 1}
train: {epochs: 1, log_every_n_steps: 4}
checkpoint: {enabled: false}
)";

TEST(WorkflowCli, PipelineTrainsEveryStageInOrder) {
  const fs::path dir = workflow_scratch();
  workflow_write(dir, "a.yaml", std::string("name: alpha\n") + kStage);
  workflow_write(dir, "b.yaml", std::string("name: beta\n") + kStage);
  const fs::path p = workflow_write(dir, "p.yaml", "pipeline: [a.yaml, b.yaml]\n");
  const Result r = workflow_run("train " + p.string() + " --output-dir " + (dir / "runs").string() + " --max-steps 8 threads=1");
  ASSERT_EQ(r.code, 0) << r.err << r.out;
  const auto first = r.out.find("=== pipeline stage 1 of 2"), second = r.out.find("=== pipeline stage 2 of 2");
  ASSERT_NE(first, std::string::npos) << r.out;
  ASSERT_NE(second, std::string::npos) << r.out;
  EXPECT_LT(first, second);
  EXPECT_NE(r.out.find("stage 1 released: tensor memory"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("pipeline summary"), std::string::npos) << r.out;
  for (const char* name : {"alpha", "beta"}) {
    const auto train = records(dir / "runs" / name / "metrics.jsonl", "train");
    ASSERT_FALSE(train.empty()) << name;
    EXPECT_EQ(train.back()["step"], 8) << name;
    // Memory monitoring: every record carries the window's peak tensor memory.
    ASSERT_TRUE(train.back().contains("mem_peak_mb")) << train.back().dump();
    EXPECT_GT(train.back()["mem_peak_mb"].get<double>(), 0);
  }
  // A broken stage: nothing trains, the stage is named, exit 2.
  workflow_write(dir, "c.yaml", std::string("name: gamma\n") + kStage + "optim: {lr: fast}\n");
  const fs::path broken = workflow_write(dir, "q.yaml", "pipeline: [a.yaml, c.yaml]\n");
  const Result bad = workflow_run("train " + broken.string() + " --output-dir " + (dir / "runs2").string());
  EXPECT_EQ(bad.code, 2) << bad.err;
  EXPECT_NE(bad.err.find("pipeline stage 2 of 2 (c.yaml)"), std::string::npos) << bad.err;
  EXPECT_FALSE(fs::exists(dir / "runs2" / "alpha"));
}

TEST(WorkflowCli, CheckpointingKeyIsCheckedAndPlanned) {
  const fs::path dir = workflow_scratch();
  const fs::path cfg = workflow_write(dir, "m.yaml", std::string("name: m\n") + kStage);
  // The MLP has no checkpointable blocks: named patterns are an error, auto says why it is off.
  const Result named = workflow_run("train " + cfg.string() + " --output-dir " + dir.string() + " --max-steps 2 checkpointing=[layers.*]");
  EXPECT_EQ(named.code, 2) << named.err;
  EXPECT_NE(named.err.find("has no checkpointable blocks"), std::string::npos) << named.err;
  const Result mixed = workflow_run("train " + cfg.string() + " --output-dir " + dir.string() + " --max-steps 2 checkpointing=[auto,x]");
  EXPECT_EQ(mixed.code, 2) << mixed.err;
  EXPECT_NE(mixed.err.find("'auto' must stand alone"), std::string::npos) << mixed.err;
  const Result autoplan = workflow_run("train " + cfg.string() + " --output-dir " + dir.string() + " --max-steps 2 checkpointing=auto threads=1");
  ASSERT_EQ(autoplan.code, 0) << autoplan.err;
  const auto plan = nlohmann::json::parse(slurp(dir / "m" / "plan.json"));
  nlohmann::json row;
  for (const auto& e : plan["entries"]) {
    if (e["key"] == "checkpointing") row = e;
  }
  EXPECT_EQ(row["value"], "off") << plan.dump();
  EXPECT_EQ(row["reason"], "auto: the model has no checkpointable blocks") << plan.dump();
  EXPECT_NE(autoplan.out.find("auto: the model has no checkpointable blocks"), std::string::npos) << autoplan.out;

  // A Transformer over windows of a series: a budget smaller than one measured step turns every layer on;
  // named patterns select layers by name.
  bellows::data::write_npy(dir / "series.npy", at::randn({400, 4}));
  const std::string seq = "name: seq\ndata: {source: npy, path: " + (dir / "series.npy").string() +
                          ", batch_size: 16, window: {length: 16, horizon: 1}}\n"
                          "model: {name: transformer, in_features: 4, d_model: 32, heads: 2, layers: 3, ff: 64, out_features: 4}\n"
                          "checkpoint: {enabled: false}\n";
  const fs::path seq_cfg = workflow_write(dir, "seq.yaml", seq);
  const Result tight = workflow_run("train " + seq_cfg.string() + " --output-dir " + dir.string() +
                           " --max-steps 2 threads=1 checkpointing=auto memory_budget_gib=0.000001");
  ASSERT_EQ(tight.code, 0) << tight.err;
  EXPECT_NE(tight.out.find("checkpointing    3 blocks"), std::string::npos) << tight.out;
  EXPECT_NE(tight.out.find("over 80% of the memory budget"), std::string::npos) << tight.out;
  const Result roomy = workflow_run("train " + seq_cfg.string() + " --output-dir " + dir.string() + " --max-steps 2 threads=1 checkpointing=auto");
  ASSERT_EQ(roomy.code, 0) << roomy.err;
  EXPECT_NE(roomy.out.find("checkpointing    off"), std::string::npos) << roomy.out;
  const Result some = workflow_run("train " + seq_cfg.string() + " --output-dir " + dir.string() +
                          " --max-steps 2 threads=1 checkpointing=[encoder.layers.1,encoder.layers.2]");
  ASSERT_EQ(some.code, 0) << some.err;
  EXPECT_NE(some.out.find("requested: encoder.layers.1, encoder.layers.2"), std::string::npos) << some.out;
  const Result wrong = workflow_run("train " + seq_cfg.string() + " --output-dir " + dir.string() + " --max-steps 2 checkpointing=[layers.*]");
  EXPECT_EQ(wrong.code, 2) << wrong.err;
  EXPECT_NE(wrong.err.find("'layers.*' matches no block"), std::string::npos) << wrong.err;
  EXPECT_NE(wrong.err.find("encoder.layers.0"), std::string::npos) << wrong.err;
}

TEST(WorkflowCli, ProfileWritesAChromeTraceOfTheChosenSteps) {
  const fs::path dir = workflow_scratch();
  const fs::path cfg = workflow_write(dir, "m.yaml", std::string("name: prof\n") + kStage);
  const Result r = workflow_run("train " + cfg.string() + " --output-dir " + dir.string() +
                       " --max-steps 6 threads=1 profile.enabled=true profile.start_step=2 profile.steps=2");
  ASSERT_EQ(r.code, 0) << r.err << r.out;
  const fs::path trace = dir / "prof" / "trace.json";
  ASSERT_TRUE(fs::exists(trace)) << r.out;
  EXPECT_NE(r.out.find("profile: trace of 2 steps written to"), std::string::npos) << r.out;
  const auto j = nlohmann::json::parse(slurp(trace));
  ASSERT_TRUE(j.contains("traceEvents"));
  int forward = 0, backward = 0, optimizer = 0, addmm = 0;
  for (const auto& e : j["traceEvents"]) {
    const std::string name = e.value("name", "");
    forward += name == "bellows::forward";
    backward += name == "bellows::backward";
    optimizer += name == "bellows::optimizer";
    addmm += name == "aten::addmm";
  }
  EXPECT_EQ(forward, 2);  // exactly the two traced steps
  EXPECT_EQ(backward, 2);
  EXPECT_EQ(optimizer, 2);
  EXPECT_GE(addmm, 2);    // the operators inside them
}

TEST(WorkflowCli, ProfileWindowFlagTracesStepsNToMAndPrintsTheTopOperators) {
  const fs::path dir = workflow_scratch();
  const fs::path cfg = workflow_write(dir, "m.yaml", std::string("name: prof\n") + kStage);
  const Result r = workflow_run("train " + cfg.string() + " --output-dir " + dir.string() + " --max-steps 6 threads=1 --profile 3-4");
  ASSERT_EQ(r.code, 0) << r.err << r.out;
  EXPECT_NE(r.out.find("profile: trace of 2 steps written to"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("top operators of the traced steps by self time (CPU):"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("aten::addmm"), std::string::npos) << r.out;
  const Result bad = workflow_run("train " + cfg.string() + " --output-dir " + dir.string() + " --max-steps 6 --profile 4-2");
  EXPECT_EQ(bad.code, 2) << bad.out;
  EXPECT_NE(bad.err.find("profile.window is '4-2'"), std::string::npos) << bad.err;
}

}  // namespace
