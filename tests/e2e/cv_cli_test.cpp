// End-to-end `bellows cv`: k folds of the MLP on synthetic classes (fold directories, the table, cv.json whose
// mean and sample std match its per-fold numbers), --folds before or after the config, the text-pair model on a
// small TSV, and the usage errors (too few folds, more folds than samples, a non-integer).
#include <fmt/format.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "run_cli.h"

namespace bellows::testing {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

fs::path write_config(const fs::path& dir, std::int64_t samples) {
  const fs::path file = dir / "cv.yaml";
  std::ofstream(file) << fmt::format(
      "name: mlpcv\nseed: 1\nthreads: 1\n"
      "data: {{source: synthetic, kind: classification, samples: {}, features: 8, classes: 3, batch_size: 32}}\n"
      "model: {{name: mlp, in_features: 8, hidden: [32], out_features: 3, task: classification}}\n"
      "train: {{epochs: 2}}\noptim: {{lr: 0.01}}\ncheckpoint: {{enabled: false}}\n",
      samples);
  return file;
}

TEST(CvCli, FoldsOfTheMlpWriteRunsTableAndSummary) {
  const fs::path dir = scratch_dir("cv_mlp");
  const CliResult r = run_cli(fmt::format("cv '{}' --folds 4 output_dir='{}'", write_config(dir, 200).string(), (dir / "runs").string()));
  ASSERT_EQ(r.code, 0) << r.err << r.out;
  EXPECT_THAT(r.out, HasSubstr("=== cross-validation fold 4 of 4: 150 samples train, 50 validate ==="));
  EXPECT_THAT(r.out, HasSubstr("cross-validation: 4 folds (stratified by class) over synthetic classification"));
  EXPECT_THAT(r.out, HasSubstr("accuracy*"));
  EXPECT_THAT(r.out, HasSubstr("std (ddof 1)"));
  const fs::path cv = dir / "runs" / "mlpcv";
  for (int k = 0; k < 4; ++k) EXPECT_TRUE(fs::exists(cv / fmt::format("fold-{}", k) / "metrics.jsonl")) << k;
  std::ifstream in(cv / "cv.json");
  const auto j = nlohmann::json::parse(in);
  ASSERT_EQ(j["per_fold"].size(), 4u);
  double sum = 0, squares = 0;
  std::vector<double> values;
  for (const auto& f : j["per_fold"]) values.push_back(f["metrics"]["accuracy"].get<double>());
  for (const double v : values) sum += v;
  const double mean = sum / 4;
  for (const double v : values) squares += (v - mean) * (v - mean);
  EXPECT_NEAR(j["mean"].get<double>(), mean, 1e-12);
  EXPECT_NEAR(j["std"].get<double>(), std::sqrt(squares / 3), 1e-12);
  EXPECT_GT(mean, 1.0 / 3.0);  // above chance for three classes
  EXPECT_THAT(r.out, HasSubstr(fmt::format("accuracy = {:.4f} +- {:.4f}", mean, std::sqrt(squares / 3))));
}

TEST(CvCli, FoldsFlagMayPrecedeTheConfig) {
  const fs::path dir = scratch_dir("cv_order");
  const CliResult r = run_cli(fmt::format("cv --folds 2 '{}' output_dir='{}' train.epochs=1", write_config(dir, 60).string(),
                                          (dir / "runs").string()));
  ASSERT_EQ(r.code, 0) << r.err << r.out;
  EXPECT_THAT(r.out, HasSubstr("cross-validation: 2 folds (stratified by class)"));
  EXPECT_TRUE(fs::exists(dir / "runs" / "mlpcv" / "fold-1"));
  EXPECT_FALSE(fs::exists(dir / "runs" / "mlpcv" / "fold-2"));
}

TEST(CvCli, TextPairModelOnASmallTsv) {
  const fs::path dir = scratch_dir("cv_text");
  {
    std::ofstream tsv(dir / "pairs.tsv");
    tsv << "premise\thypothesis\tlabel\n";
    const char* nouns[] = {"cat", "dog", "bird", "farmer"};
    for (int i = 0; i < 48; ++i) {
      tsv << fmt::format("the {} sleeps in the garden\tthe {} {}\t{}\n", nouns[i % 4], nouns[(i / 4) % 4],
                         i % 2 ? "sleeps" : "is awake", i % 2 ? "entailment" : "contradiction");
    }
  }
  std::ofstream(dir / "text.yaml") << fmt::format(
      "name: text\nthreads: 1\ndata: {{source: text_pairs, path: '{}', batch_size: 8, text: {{vocab_size: 40}}}}\n"
      "model: {{name: text_pair, d_model: 16, heads: 2, layers: 1, ff: 32}}\ntrain: {{epochs: 1}}\ncheckpoint: {{enabled: false}}\n",
      (dir / "pairs.tsv").string());
  const CliResult r = run_cli(fmt::format("cv '{}' --folds 3 output_dir='{}'", (dir / "text.yaml").string(), (dir / "runs").string()));
  ASSERT_EQ(r.code, 0) << r.err << r.out;
  EXPECT_THAT(r.out, HasSubstr("cross-validation: 3 folds (stratified by class) over text pairs"));
  EXPECT_THAT(r.out, HasSubstr("(48 pairs, 2 classes"));
  EXPECT_TRUE(fs::exists(dir / "pairs.tsv.spm-unigram-40.model"));  // the vocabulary, trained once and cached
  std::ifstream in(dir / "runs" / "text" / "cv.json");
  const auto j = nlohmann::json::parse(in);
  EXPECT_EQ(j["monitor"], "accuracy");
  EXPECT_EQ(j["per_fold"].size(), 3u);
  for (const auto& f : j["per_fold"]) EXPECT_EQ(f["val_samples"], 16);
}

TEST(CvCli, BadFoldCountsAreUsageErrors) {
  const fs::path dir = scratch_dir("cv_errors");
  const fs::path config = write_config(dir, 20);
  CliResult r = run_cli(fmt::format("cv '{}' --folds 1 output_dir='{}'", config.string(), (dir / "runs").string()));
  EXPECT_EQ(r.code, 2);
  EXPECT_THAT(r.err, HasSubstr("at least 2 folds"));
  r = run_cli(fmt::format("cv '{}' --folds=25 output_dir='{}'", config.string(), (dir / "runs").string()));
  EXPECT_EQ(r.code, 2);
  EXPECT_THAT(r.err, HasSubstr("25 folds but only 20 samples"));
  r = run_cli(fmt::format("cv '{}' --folds five", config.string()));
  EXPECT_EQ(r.code, 2);
  EXPECT_THAT(r.err, HasSubstr("--folds 'five' is not an integer"));
  EXPECT_FALSE(fs::exists(dir / "runs"));
}

}  // namespace
}  // namespace bellows::testing
