// Cross-validation runs: the summary's mean and sample std (ddof 1), k folds of the MLP on synthetic
// classification data (fold directories, per-fold metrics equal to each fold's last evaluation, cv.json), and the
// errors for too few folds and more folds than samples.
#include "bellows/lab/cv.h"

#include <fmt/format.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "bellows/app/schema.h"
#include "bellows/util/error.h"
#include "test_util.h"

namespace bellows::lab {
using namespace bellows::app;  // the composition root the tools are built on
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;
using test_support::error_from;
using test_support::TempDir;

config::Config mlp_config(const fs::path& dir, std::int64_t samples) {
  const fs::path file = dir / "cv.yaml";
  std::ofstream(file) << fmt::format(
      "name: mlpcv\noutput_dir: {}\nseed: 3\nthreads: 1\n"
      "data: {{source: synthetic, kind: classification, samples: {}, features: 8, classes: 3, batch_size: 32, workers: 0}}\n"
      "model: {{name: mlp, in_features: 8, hidden: [32], out_features: 3, task: classification}}\n"
      "train: {{epochs: 3, log_every_n_steps: 5}}\noptim: {{lr: 0.01}}\ncheckpoint: {{enabled: false}}\n",
      (dir / "runs").string(), samples);
  return resolve_config(file, {});
}

TEST(CrossValidation, SummaryIsMeanAndSampleStd) {
  const MetricSummary s = summarize_metric("accuracy", {0.5, 0.7, 0.9});
  EXPECT_DOUBLE_EQ(s.mean, 0.7);
  EXPECT_NEAR(s.std, 0.2, 1e-12);  // sqrt((0.04 + 0 + 0.04) / (3 - 1)); the population std would be 0.163
  const MetricSummary two = summarize_metric("loss", {1.0, 2.0});
  EXPECT_DOUBLE_EQ(two.mean, 1.5);
  EXPECT_NEAR(two.std, std::sqrt(0.5), 1e-12);
  EXPECT_EQ(error_from([] { summarize_metric("x", {1.0}); }).kind(), ErrorKind::kInternal);
}

TEST(CrossValidation, ThreeFoldsOfTheMlpOnSyntheticClasses) {
  const TempDir temp("cv_test");
  const fs::path& dir = temp.path();
  RunOptions quiet;
  quiet.console = nullptr;
  const CvSummary s = cross_validate(mlp_config(dir, 300), 3, quiet);
  EXPECT_EQ(s.dir, dir / "runs" / "mlpcv");
  EXPECT_EQ(s.folds, 3);
  EXPECT_EQ(s.samples, 300);
  EXPECT_TRUE(s.stratified);  // synthetic classification knows its labels
  EXPECT_EQ(s.monitor, "accuracy");
  EXPECT_FALSE(s.interrupted);
  ASSERT_EQ(s.results.size(), 3u);
  std::int64_t held_out = 0;
  std::vector<double> accuracies;
  for (std::size_t k = 0; k < 3; ++k) {
    const FoldResult& r = s.results[k];
    EXPECT_EQ(r.run_dir, s.dir / fmt::format("fold-{}", k));
    EXPECT_EQ(r.train_samples + r.val_samples, 300);
    EXPECT_EQ(r.val_samples, 100);
    EXPECT_EQ(r.steps, 3 * 7);  // 200 training samples in batches of 32, 3 epochs
    held_out += r.val_samples;
    // The fold's numbers are its last evaluation in metrics.jsonl.
    std::ifstream in(r.run_dir / "metrics.jsonl");
    nlohmann::json last;
    for (std::string line; std::getline(in, line);) {
      const auto j = nlohmann::json::parse(line);
      if (j["type"] == "eval") last = j;
    }
    ASSERT_FALSE(last.is_null());
    double accuracy = -1;
    for (const auto& [name, value] : r.metrics) {
      EXPECT_DOUBLE_EQ(value, last[name].get<double>()) << name;
      if (name == "accuracy") accuracy = value;
    }
    EXPECT_GT(accuracy, 1.0 / 3.0) << "fold " << k;  // three classes: chance is 1/3
    accuracies.push_back(accuracy);
  }
  EXPECT_EQ(held_out, 300);
  // The monitored metric is summarised first, and the summary's numbers are the folds'.
  ASSERT_GE(s.metrics.size(), 2u);
  EXPECT_EQ(s.metrics[0].name, "accuracy");
  EXPECT_EQ(s.metrics[0].values, accuracies);
  const MetricSummary expected = summarize_metric("accuracy", accuracies);
  EXPECT_DOUBLE_EQ(s.metrics[0].mean, expected.mean);
  EXPECT_DOUBLE_EQ(s.metrics[0].std, expected.std);
  // cv.json holds the same.
  std::ifstream cv(s.dir / "cv.json");
  const auto j = nlohmann::json::parse(cv);
  EXPECT_EQ(j["folds"], 3);
  EXPECT_EQ(j["monitor"], "accuracy");
  EXPECT_EQ(j["std_ddof"], 1);
  EXPECT_DOUBLE_EQ(j["mean"].get<double>(), expected.mean);
  EXPECT_DOUBLE_EQ(j["std"].get<double>(), expected.std);
  ASSERT_EQ(j["per_fold"].size(), 3u);
  EXPECT_DOUBLE_EQ(j["per_fold"][2]["metrics"]["accuracy"].get<double>(), accuracies[2]);
  const std::string table = cv_table(s);
  EXPECT_THAT(table, HasSubstr("accuracy*"));
  EXPECT_THAT(table, HasSubstr("std (ddof 1)"));
  EXPECT_THAT(table, HasSubstr(fmt::format("accuracy = {:.4f} +- {:.4f}", expected.mean, expected.std)));
  // A second run goes to a fresh directory.
  const CvSummary again = cross_validate(mlp_config(dir, 60), 2, quiet);
  EXPECT_EQ(again.dir, dir / "runs" / "mlpcv-2");
}

TEST(CrossValidation, TooFewFoldsOrSamplesAreErrorsBeforeTraining) {
  const TempDir temp("cv_test");
  const fs::path& dir = temp.path();
  RunOptions quiet;
  quiet.console = nullptr;
  Error e = error_from([&] { cross_validate(mlp_config(dir, 100), 1, quiet); });
  EXPECT_EQ(e.kind(), ErrorKind::kUsage);
  EXPECT_THAT(e.message(), HasSubstr("at least 2 folds"));
  e = error_from([&] { cross_validate(mlp_config(dir, 4), 5, quiet); });
  EXPECT_EQ(e.kind(), ErrorKind::kConfig);
  EXPECT_THAT(e.message(), HasSubstr("5 folds but only 4 samples"));
  EXPECT_FALSE(fs::exists(dir / "runs" / "mlpcv"));  // nothing trained, nothing written
}

}  // namespace
}  // namespace bellows::lab
