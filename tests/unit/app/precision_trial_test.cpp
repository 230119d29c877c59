// precision: auto's trial on the CPU (app/precision_trial.h): the choice follows the measured gain, the verdict is
// cached per machine, model and batch, and the trial leaves the model as it found it.
#include "bellows/app/precision_trial.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cstdlib>
#include <filesystem>
#include <optional>

#include "bellows/models/tasks.h"
#include "../test_util.h"

namespace bellows::app {
namespace {

TEST(PrecisionTrial, TheReducedPrecisionIsKeptOnlyWhereItMeasuredClearlyFaster) {
  PrecisionTrial t;
  t.reduced = "bf16-mixed";
  t.fp32_ms = 10;
  t.reduced_ms = 10 / kReducedPrecisionMinGain;  // exactly the gain that earns it
  EXPECT_EQ(precision_from_trial(t, "CPU has AMX-BF16").first, "bf16-mixed");
  t.reduced_ms = 10 / (kReducedPrecisionMinGain - 0.01);
  const auto [kept, why] = precision_from_trial(t, "CPU has AMX-BF16");
  EXPECT_EQ(kept, "fp32");
  EXPECT_NE(why.find("bf16-mixed measured 1.09x fp32's speed for this model"), std::string::npos) << why;
  t.reduced_ms = 12.2;  // issue 44: torchvision's ResNet-18 on an AMX Xeon, fp32 1.22x faster
  EXPECT_EQ(precision_from_trial(t, "").first, "fp32");
  t.reduced_ms = 5.7;  // W1 on an AVX512_BF16 EPYC: bf16-mixed 1.75x faster
  const auto [chosen, reason] = precision_from_trial(t, "CPU has AVX512_BF16");
  EXPECT_EQ(chosen, "bf16-mixed");
  EXPECT_NE(reason.find("auto: CPU has AVX512_BF16; measured 1.75x faster than fp32 for this model"), std::string::npos) << reason;
}

// The measurement itself: a second trial of the same model and batch reads the first one's verdict; another batch
// shape is another trial; the weights, buffers and gradients are as before.
TEST(PrecisionTrial, AVerdictIsCachedPerModelAndBatchAndTheModelIsUntouched) {
  const test_support::TempDir cache("precision_trial");
  const std::optional<std::string> old = std::getenv("BELLOWS_CACHE") ? std::optional<std::string>(std::getenv("BELLOWS_CACHE")) : std::nullopt;
  ::setenv("BELLOWS_CACHE", cache.path().c_str(), 1);
  torch::manual_seed(0);
  auto model = std::make_shared<torch::nn::SequentialImpl>(torch::nn::Linear(8, 16), torch::nn::BatchNorm1d(16), torch::nn::Linear(16, 1));
  const std::shared_ptr<Task> task = models::make_regression_task(
      models::Forward([](torch::nn::Module& m, const at::Tensor& x) { return static_cast<torch::nn::SequentialImpl&>(m).forward(x); }));
  data::Batch batch;
  batch.size = 32;
  batch.tensors["x"] = torch::randn({32, 8});
  batch.tensors["y"] = torch::randn({32, 1});
  std::vector<at::Tensor> before;
  for (const auto& t : model->parameters()) before.push_back(t.clone());
  for (const auto& t : model->buffers()) before.push_back(t.clone());

  const PrecisionTrial first = measure_precision_trial(*model, *task, batch, "bf16-mixed");
  EXPECT_FALSE(first.cached);
  EXPECT_GT(first.fp32_ms, 0);
  EXPECT_GT(first.reduced_ms, 0);
  ASSERT_TRUE(std::filesystem::exists(first.cache_file)) << first.cache_file;
  const PrecisionTrial again = measure_precision_trial(*model, *task, batch, "bf16-mixed");
  EXPECT_TRUE(again.cached);
  EXPECT_EQ(again.cache_file, first.cache_file);
  EXPECT_EQ(again.fp32_ms, first.fp32_ms);
  EXPECT_EQ(again.reduced_ms, first.reduced_ms);
  data::Batch smaller = batch.slice(0, 16);
  const PrecisionTrial other = measure_precision_trial(*model, *task, smaller, "bf16-mixed");
  EXPECT_FALSE(other.cached);
  EXPECT_NE(other.cache_file, first.cache_file);

  std::size_t i = 0;
  for (const auto& t : model->parameters()) {
    EXPECT_TRUE(t.equal(before[i++]));
    EXPECT_FALSE(t.grad().defined());
  }
  for (const auto& t : model->buffers()) EXPECT_TRUE(t.equal(before[i++]));
  if (old) ::setenv("BELLOWS_CACHE", old->c_str(), 1);
  else ::unsetenv("BELLOWS_CACHE");
}

}  // namespace
}  // namespace bellows::app
