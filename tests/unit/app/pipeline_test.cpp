// Pipelines: stages train in order with the shared overrides, memory is released between them, and a broken
// stage fails before anything trains, naming the stage.
#include "bellows/app/pipeline.h"

#include <fmt/format.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <fstream>

#include "bellows/obs/memory.h"
#include "test_util.h"

namespace bellows::app {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;
using test_support::error_from;

class Pipeline : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::path(::testing::TempDir()) / fmt::format("bellows_pipeline_{}", ::getpid());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  void write(const std::string& name, const std::string& text) { std::ofstream(dir_ / name) << text; }
  static std::string stage(const std::string& name, int hidden) {
    return fmt::format(R"(name: {}
data: {{source: synthetic, kind: regression, samples: 512, features: 8, batch_size: 64}}
model: {{name: mlp, in_features: 8, hidden: [{}], out_features: 1}}
train: {{epochs: 1}}
checkpoint: {{enabled: false}}
)", name, hidden);
  }
  fs::path dir_;
};

TEST_F(Pipeline, StagesTrainInOrderWithTheOverridesAndReleaseTheirMemory) {
  write("a.yaml", stage("first", 32));
  write("b.yaml", stage("second", 64));
  write("p.yaml", "pipeline: [a.yaml, b.yaml]\n");
  ASSERT_TRUE(is_pipeline_file(dir_ / "p.yaml"));
  EXPECT_FALSE(is_pipeline_file(dir_ / "a.yaml"));
  obs::install_cpu_tracking();
  const std::int64_t before = obs::memory_stats(c10::Device(c10::kCPU)).current_bytes;
  RunOptions quiet;
  quiet.console = nullptr;
  const auto results = run_pipeline(dir_ / "p.yaml", {"output_dir=" + (dir_ / "runs").string(), "train.max_steps=3"}, quiet);
  ASSERT_EQ(results.size(), 2u);
  EXPECT_EQ(results[0].name, "first");
  EXPECT_EQ(results[1].name, "second");
  for (const auto& r : results) {
    EXPECT_EQ(r.run.fit.steps, 3) << r.name << ": the override reached every stage";
    EXPECT_TRUE(fs::exists(dir_ / "runs" / r.name / "metrics.jsonl")) << r.name;
    // At least the weights, gradients and AdamW's two moments of the stage's MLP (8 -> hidden -> 1, float32).
    const std::int64_t hidden = r.name == "first" ? 32 : 64, params = 8 * hidden + hidden + hidden + 1;
    EXPECT_GE(r.peak_bytes, 4 * params * 4) << r.name;
    // The stage's model, optimizer state and data are gone: what is left is within 1 MB of the start.
    EXPECT_LT(r.left_bytes - before, 1 << 20) << r.name << " left " << r.left_bytes - before << " bytes";
  }
}

TEST_F(Pipeline, ABrokenStageFailsBeforeAnythingTrains) {
  write("a.yaml", stage("first", 32));
  write("b.yaml", stage("second", 64) + "optim: {lr: fast}\n");
  write("p.yaml", "pipeline: [a.yaml, b.yaml]\n");
  const Error e = error_from([&] { run_pipeline(dir_ / "p.yaml", {"output_dir=" + (dir_ / "runs").string()}, RunOptions{.console = nullptr}); });
  EXPECT_EQ(e.kind(), ErrorKind::kConfig);
  EXPECT_THAT(e.message(), HasSubstr("pipeline stage 2 of 2 (b.yaml)"));
  EXPECT_THAT(e.message(), HasSubstr("'optim.lr' expects a number"));
  EXPECT_FALSE(fs::exists(dir_ / "runs" / "first")) << "stage 1 trained before stage 2 was checked";
}

TEST_F(Pipeline, MalformedPipelineFilesAreNamed) {
  write("a.yaml", stage("first", 32));
  write("extra.yaml", "pipeline: [a.yaml]\nseed: 3\n");
  EXPECT_THAT(error_from([&] { pipeline_stages(dir_ / "extra.yaml"); }).message(), HasSubstr("unknown key 'seed' in a pipeline file"));
  write("missing.yaml", "pipeline: [a.yaml, nope.yaml]\n");
  EXPECT_THAT(error_from([&] { pipeline_stages(dir_ / "missing.yaml"); }).message(), HasSubstr("pipeline entry 1: config file"));
  write("empty.yaml", "pipeline: []\n");
  EXPECT_THAT(error_from([&] { pipeline_stages(dir_ / "empty.yaml"); }).message(), HasSubstr("non-empty list"));
  write("bad.yaml", "pipeline: [a.yaml\n");
  EXPECT_EQ(error_from([&] { pipeline_stages(dir_ / "bad.yaml"); }).kind(), ErrorKind::kConfig);
  const auto stages = pipeline_stages([&] { write("ok.yaml", "pipeline: [a.yaml]\n"); return dir_ / "ok.yaml"; }());
  ASSERT_EQ(stages.size(), 1u);
  EXPECT_EQ(stages[0], dir_ / "a.yaml");
}

}  // namespace
}  // namespace bellows::app
