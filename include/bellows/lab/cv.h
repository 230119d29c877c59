// K-fold cross-validation of a run config (seed 004's 5-fold CV; `bellows cv CONFIG --folds K`): each fold
// trains a fresh model with run() on every fold but one and evaluates on the held-out fold (data.cv.folds /
// data.cv.fold; folds stratified by class when the dataset knows its labels), writing
// <output_dir>/<name>/fold-<k>/; then the per-fold metrics of the last evaluation, their mean and sample standard
// deviation (ddof 1) go to a table and to <output_dir>/<name>/cv.json. Works for any model and data source.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "bellows/config/config.h"  // defines: Config
#include "bellows/app/run.h"      // defines: RunOptions

namespace bellows::lab {

// Mean and sample standard deviation (ddof 1: divided by n - 1) of one metric over the folds.
struct MetricSummary {
  std::string name;
  std::vector<double> values;  // fold by fold
  double mean = 0;
  double std = 0;
};
MetricSummary summarize_metric(std::string name, std::vector<double> values);  // kInternal error for fewer than 2 values

struct FoldResult {
  std::int64_t fold = 0;
  std::filesystem::path run_dir;
  std::int64_t train_samples = 0, val_samples = 0;
  std::int64_t steps = 0;
  double seconds = 0;
  std::vector<std::pair<std::string, double>> metrics;  // the last evaluation on the held-out fold (loss, accuracy, ...)
};

struct CvSummary {
  std::filesystem::path dir;          // <output_dir>/<name> (or <name>-2, ... when that one holds a run)
  std::int64_t folds = 0;
  std::int64_t samples = 0;
  bool stratified = false;            // folds were dealt class by class
  std::string dataset;                // the data's name
  std::string monitor;                // the task's monitored metric ("accuracy", "loss", ...)
  std::vector<FoldResult> results;    // completed folds, in order
  std::vector<MetricSummary> metrics; // over the completed folds (needs 2 or more); the monitored one first
  bool interrupted = false;           // a stop request ended a fold early; later folds did not run
};

// Runs the folds (`folds` >= 2; more folds than samples is a kConfig error found before any training).
// `config` is a validated run config; its output_dir and name place the folds, data.cv.* are set per fold.
CvSummary cross_validate(const config::Config& config, std::int64_t folds, const app::RunOptions& options = {});

// The summary as an aligned table (per fold, then mean and std) and as cv.json's object.
std::string cv_table(const CvSummary& summary);
nlohmann::json cv_json(const CvSummary& summary);

}  // namespace bellows::lab
