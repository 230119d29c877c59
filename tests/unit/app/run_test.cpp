// Runs assembled from a config: the embedded demo trained under two precision policies agrees (issue 3); a
// program trains on samples it pushed into a stream buffer (data.source: stream).
#include <ATen/ATen.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "bellows/app/run.h"
#include "bellows/app/schema.h"
#include "bellows/data/stream_buffer.h"
#include "bellows/util/error.h"

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

// data.batch_size: auto. Without a limit the demo's whole batch of 512 fits (one part). Then a CPU tensor limit
// between what a step on 256 and on 512 samples needs (read from the first run's plan row: what was held, the
// optimizer state to come, and the measured steps) makes the finder run each batch of 512 as two of 256, and the
// run ends with the weights, bitwise, of one planned with batches of 256 and accumulation 2.
nlohmann::json plan_row(const std::filesystem::path& run_dir, const std::string& key) {
  std::ifstream in(run_dir / "plan.json");
  const nlohmann::json plan = nlohmann::json::parse(in);
  for (const auto& row : plan.at("entries")) {
    if (row.at("key") == key) return row;
  }
  return {};
}

double mb_after(const std::string& text, const std::string& before) {
  const auto at = text.find(before);
  EXPECT_NE(at, std::string::npos) << before << " in " << text;
  return at == std::string::npos ? 0.0 : std::stod(text.substr(at + before.size()));
}

TEST(Run, BatchSizeAutoSplitsTheGlobalBatchIntoWhatFits) {
  const auto dir = std::filesystem::path(::testing::TempDir()) / ("batch_auto_" + std::to_string(getpid()));
  // A wide MLP on less data: a step's memory is large next to what building the data needs at its peak.
  const std::vector<std::string> common = {"train.max_steps=6", "threads=1", "precision=fp32", "output_dir=" + dir.string(),
                                           "log.flops=false", "data.workers=0", "data.samples=8192", "model.hidden=[1024,1024]"};
  auto run_with = [&](const std::string& name, std::vector<std::string> args) {
    args.insert(args.end(), common.begin(), common.end());
    args.push_back("name=" + name);
    RunOptions ro;
    ro.console = nullptr;
    RunResult r = run(resolve_config(std::nullopt, args), ro);
    return r;
  };
  const RunResult roomy = run_with("roomy", {"data.batch_size=auto", "train.global_batch_size=512"});
  const nlohmann::json row = plan_row(roomy.run_dir, "micro_batch");
  ASSERT_FALSE(row.is_null());
  EXPECT_EQ(row.at("value"), "512 x 1");
  EXPECT_EQ(roomy.fit.samples, 6 * 512);
  const std::string why = row.at("reason");
  const double held = mb_after(why, "margin, "), later = mb_after(why, "MB held and ");
  const double p256 = mb_after(why, "256: "), p512 = mb_after(why, "512: ");
  ASSERT_GT(p512 - p256, 0.5) << why;
  // The budget less its 10% margin must leave room for 256 samples and not for 512.
  const double limit_mb = (held + later + (p256 + p512) / 2) / 0.9;
  const RunResult tight = run_with("tight", {"data.batch_size=auto", "train.global_batch_size=512",
                                             fmt::format("cpu_tensor_limit_mb={:.3f}", limit_mb)});
  EXPECT_EQ(plan_row(tight.run_dir, "micro_batch").at("value"), "256 x 2") << plan_row(tight.run_dir, "micro_batch").dump();
  EXPECT_EQ(tight.fit.micro_split, 2);
  EXPECT_EQ(tight.fit.oom_recoveries, 0);
  const RunResult planned = run_with("planned", {"data.batch_size=256", "train.accumulation_steps=2"});
  EXPECT_EQ(tight.fit.final_loss, planned.fit.final_loss);
  const auto weights = [](const std::filesystem::path& run_dir) {
    std::ifstream in(run_dir / "checkpoints" / "step-000000006" / "model.safetensors", std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(in), {});
  };
  EXPECT_FALSE(weights(tight.run_dir).empty());
  EXPECT_TRUE(weights(tight.run_dir) == weights(planned.run_dir)) << "the weights differ";
  std::filesystem::remove_all(dir);
}

TEST(Run, BatchSizeAutoNeedsAGlobalBatchThatFitsTheOtherKeys) {
  const auto error_of = [](const std::vector<std::string>& args) {
    try {
      RunOptions ro;
      ro.console = nullptr;
      run(resolve_config(std::nullopt, args), ro);
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::kConfig) << e.message();
      return e.message();
    }
    return std::string("no error");
  };
  EXPECT_NE(error_of({"data.batch_size=auto"}).find("data.batch_size is auto (command line 'data.batch_size=auto') but train.global_batch_size is not set"),
            std::string::npos);
  EXPECT_NE(error_of({"data.batch_size=auto", "train.global_batch_size=512", "train.accumulation_steps=2"})
                .find("data.batch_size is auto, which sets the micro-batches per optimizer step, but train.accumulation_steps is 2"),
            std::string::npos);
  EXPECT_NE(error_of({"data.batch_size=64", "train.global_batch_size=512"})
                .find("train.global_batch_size is 512 (command line 'train.global_batch_size=512'), but data.batch_size 64 x "
                      "train.accumulation_steps 1 x 1 rank(s) is 64"),
            std::string::npos);
  EXPECT_NE(error_of({"data.batch_size=many"}).find("'data.batch_size' expects an integer"), std::string::npos);
  EXPECT_NE(error_of({"data.batch_size=many"}).find("(or one of: auto)"), std::string::npos)
      << error_of({"data.batch_size=many"});
}

}  // namespace
}  // namespace bellows::app
