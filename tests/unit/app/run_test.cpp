// Runs assembled from a config: the embedded demo trained under two precision policies agrees (issue 3); a
// program trains on samples it pushed into a stream buffer (data.source: stream).
#include <ATen/ATen.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>

#include "bellows/app/run.h"
#include "bellows/app/schema.h"
#include "bellows/data/stream_buffer.h"

namespace bellows::app {
namespace {

using train::FitResult;

// Issue 3: bf16-mixed and fp32 loss curves on the demo agree within 2% after 200 steps.
TEST(Demo, Bf16AndFp32LossesAgreeAfter200Steps) {
  const auto dir = std::filesystem::path(::testing::TempDir()) / ("bf16_vs_fp32_" + std::to_string(getpid()));
  auto final_loss = [&](const std::string& precision) {
    const config::Config c = resolve_config(std::nullopt, {"train.max_steps=200", "train.log_every_n_steps=25", "precision=" + precision,
                                                            "output_dir=" + dir.string(), "threads=1",
                                                            "train.eval_every_n_steps=100"});
    RunOptions ro;
    ro.console = nullptr;
    return run(c, ro).fit;
  };
  const FitResult f32 = final_loss("fp32");
  const FitResult b16 = final_loss("bf16-mixed");
  EXPECT_EQ(f32.steps, 200);
  EXPECT_EQ(b16.steps, 200);
  ASSERT_TRUE(f32.last_eval && b16.last_eval);
  EXPECT_NEAR(b16.final_loss / f32.final_loss, 1.0, 0.02) << "train loss " << b16.final_loss << " vs " << f32.final_loss;
  EXPECT_NEAR(*b16.last_eval / *f32.last_eval, 1.0, 0.02) << "eval loss " << *b16.last_eval << " vs " << *f32.last_eval;
  std::filesystem::remove_all(dir);
}

TEST(Run, TrainsOnTheSamplesAProgramPushed) {
  const auto dir = std::filesystem::path(::testing::TempDir()) / ("stream_run_" + std::to_string(getpid()));
  const config::Config c = resolve_config(std::nullopt, {"data.source=stream", "model.in_features=4", "data.batch_size=8",
                                                         "data.val_fraction=0", "train.max_steps=3", "threads=1",
                                                         "checkpoint.enabled=false", "output_dir=" + dir.string()});
  RunOptions ro;
  ro.console = nullptr;
  ro.stream = std::make_shared<data::StreamBuffer>(data::stream_buffer_options(c));
  for (int i = 0; i < 64; ++i) {
    const at::Tensor x = at::randn({4});
    ro.stream->push({{"x", x}, {"y", x.sum().reshape({1})}});
  }
  const RunResult r = run(c, ro);
  EXPECT_EQ(r.fit.steps, 3);
  EXPECT_GE(r.data.samples, 24);  // 3 batches of 8 trained on
  EXPECT_EQ(ro.stream->size(), 0);  // taken by the run
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace bellows::app
