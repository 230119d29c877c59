// K-fold cross-validation; see cv.h.
#include "bellows/lab/cv.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <fstream>

#include "bellows/data/build.h"
#include "bellows/data/folds.h"
#include "bellows/data/subset.h"
#include "bellows/models/registry.h"
#include "bellows/app/run_settings.h"  // defines: run_settings (the seed)
#include "bellows/app/schema.h"
#include "bellows/util/atomic_file.h"
#include "bellows/util/check.h"

namespace bellows::lab {
namespace fs = std::filesystem;

namespace {

// A fresh directory for the folds: <output_dir>/<name>, or <name>-2, -3, ... when that one holds something.
fs::path make_cv_dir(const config::Config& c) {
  const app::RunSettings run = app::run_settings(c);
  const fs::path base = fs::path(run.output_dir) / run.name;
  fs::path dir = base;
  for (int i = 2; fs::exists(dir) && !fs::is_empty(dir); ++i) dir = base.string() + "-" + std::to_string(i);
  std::error_code ec;
  fs::create_directories(dir, ec);
  BELLOWS_CHECK_RESOURCE(!ec, fmt::format("cannot create the cross-validation directory {}: {}", dir.string(), ec.message()),
                         "check output_dir and its permissions");
  return dir;
}

// The fold of every sample, as the data setup will deal them (data.cv.*), checked before any fold trains.
struct Assignment {
  std::vector<std::int64_t> folds;
  bool stratified = false;
  std::string dataset;
};

Assignment assign(const config::Config& c, std::int64_t k) {
  config::Config first = c;
  const config::Origin origin = config::Origin::noted("bellows cv");
  first.set("data.cv.folds", YAML::Node(k), origin);
  first.set("data.cv.fold", YAML::Node(0), origin);
  const auto seed = static_cast<std::uint64_t>(app::run_settings(c).seed);
  // A kConfig error here when k > samples.
  const data::DataSplits splits = data::build_datasets(first, seed);
  const auto* subset = dynamic_cast<const data::SubsetDataset*>(splits.val.get());
  BELLOWS_CHECK(subset != nullptr, "the cross-validation split is not a subset of the data", "report this bug");
  const data::Dataset& all = subset->base();
  const at::Tensor labels = all.class_labels();
  Assignment a;
  a.folds = data::assign_folds(all.size(), k, seed, labels);
  a.stratified = labels.defined();
  a.dataset = all.name();
  return a;
}

// The last evaluation's values and the monitored metric's name, from the fold's metrics.jsonl.
void read_fold_metrics(const fs::path& run_dir, FoldResult& result, std::string& monitor) {
  const fs::path path = run_dir / "metrics.jsonl";
  std::ifstream in(path);
  BELLOWS_CHECK_DATA(in.good(), fmt::format("cannot read {}", path.string()), "check the fold's run directory");
  nlohmann::json last_eval;
  for (std::string line; std::getline(in, line);) {
    if (line.empty()) continue;
    const nlohmann::json j = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
    if (j.is_discarded() || !j.contains("type")) continue;
    if (j["type"] == "eval") last_eval = j;
    if (j["type"] == "end" && j.contains("summary")) {
      for (const auto& [key, value] : j["summary"].items()) {
        if (key.starts_with("last eval ")) monitor = key.substr(std::string("last eval ").size());
      }
    }
  }
  BELLOWS_CHECK_DATA(!last_eval.is_null(), fmt::format("fold {}: {} has no evaluation", result.fold, path.string()),
                     "the held-out fold is evaluated at each epoch end (train.eval_every_n_steps: 0); check that the fold "
                     "trained at least one epoch");
  for (const auto& [key, value] : last_eval.items()) {
    if (key == "type" || key == "step" || key == "epoch" || key == "ema" || !value.is_number()) continue;
    result.metrics.emplace_back(key, value.get<double>());
  }
}

}  // namespace

MetricSummary summarize_metric(std::string name, std::vector<double> values) {
  BELLOWS_CHECK(values.size() >= 2, fmt::format("a sample standard deviation of {} over {} value(s)", name, values.size()),
                "summarise two or more folds");
  MetricSummary s;
  s.name = std::move(name);
  const auto n = static_cast<double>(values.size());
  double sum = 0;
  for (const double v : values) sum += v;
  s.mean = sum / n;
  double squares = 0;
  for (const double v : values) squares += (v - s.mean) * (v - s.mean);
  s.std = std::sqrt(squares / (n - 1));
  s.values = std::move(values);
  return s;
}

CvSummary cross_validate(const config::Config& c, std::int64_t k, const app::RunOptions& options) {
  BELLOWS_CHECK_USAGE(k >= 2, fmt::format("--folds {}: cross-validation needs at least 2 folds", k), "use --folds 5 (the usual)");
  const app::RunSettings settings = app::run_settings(c);
  BELLOWS_CHECK_CONFIG(settings.resume.empty(),
                       fmt::format("resume is set ({}); cross-validation trains every fold from the start", c.origin("resume").str()),
                       "drop resume");
  BELLOWS_CHECK_CONFIG(data::data_options(c).val_path.empty(),
                       fmt::format("data.val_path is set ({}); cross-validation holds out each fold of data.path instead",
                                   c.origin("data.val_path").str()),
                       "drop data.val_path");
  const Assignment assignment = assign(c, k);
  CvSummary summary;
  summary.folds = k;
  summary.samples = static_cast<std::int64_t>(assignment.folds.size());
  summary.stratified = assignment.stratified;
  summary.dataset = assignment.dataset;
  summary.dir = make_cv_dir(c);
  const std::string& model = settings.model_name;
  const config::Origin origin = config::Origin::noted("bellows cv");

  for (std::int64_t fold = 0; fold < k; ++fold) {
    config::Config fc = c;
    fc.set("output_dir", YAML::Node(summary.dir.string()), origin);
    fc.set("name", YAML::Node(fmt::format("fold-{}", fold)), origin);
    fc.set("data.cv.folds", YAML::Node(k), origin);
    fc.set("data.cv.fold", YAML::Node(fold), origin);
    app::run_schema(model).validate(fc);
    FoldResult result;
    result.fold = fold;
    result.val_samples = std::count(assignment.folds.begin(), assignment.folds.end(), fold);
    result.train_samples = summary.samples - result.val_samples;
    if (options.console) {
      std::fprintf(options.console, "%s\n",
                   fmt::format("=== cross-validation fold {} of {}: {} samples train, {} validate ===", fold + 1, k,
                               result.train_samples, result.val_samples).c_str());
    }
    const app::RunResult r = run(fc, options);
    result.run_dir = r.run_dir;
    result.steps = r.fit.steps;
    result.seconds = r.fit.seconds;
    if (r.fit.interrupted) {
      summary.interrupted = true;
      break;
    }
    read_fold_metrics(r.run_dir, result, summary.monitor);
    summary.results.push_back(std::move(result));
  }

  // --- per metric: mean and sample std over the folds, the monitored metric first ---
  if (summary.results.size() >= 2) {
    std::vector<std::string> names;
    for (const auto& [name, v] : summary.results.front().metrics) names.push_back(name);
    std::stable_partition(names.begin(), names.end(), [&](const std::string& n) { return n == summary.monitor; });
    for (const auto& name : names) {
      std::vector<double> values;
      for (const auto& r : summary.results) {
        for (const auto& [n, v] : r.metrics) {
          if (n == name) values.push_back(v);
        }
      }
      if (values.size() == summary.results.size()) summary.metrics.push_back(summarize_metric(name, values));
    }
  }
  write_file_atomically(summary.dir / "cv.json", cv_json(summary).dump(2) + "\n");
  return summary;
}

std::string cv_table(const CvSummary& s) {
  std::string out = fmt::format("cross-validation: {} folds{} over {}\n", s.folds, s.stratified ? " (stratified by class)" : "", s.dataset);
  std::vector<std::string> names;
  for (const auto& m : s.metrics) names.push_back(m.name);
  if (names.empty() && !s.results.empty()) {
    for (const auto& [n, v] : s.results.front().metrics) names.push_back(n);
  }
  const auto column = [&](const std::string& n) { return n == s.monitor ? n + "*" : n; };
  out += fmt::format("{:<14}{:>8}{:>8}", "fold", "train", "val");
  for (const auto& n : names) out += fmt::format("{:>14}", column(n));
  out += "\n";
  for (const auto& r : s.results) {
    out += fmt::format("{:<14}{:>8}{:>8}", r.fold, r.train_samples, r.val_samples);
    for (const auto& n : names) {
      const auto it = std::find_if(r.metrics.begin(), r.metrics.end(), [&](const auto& m) { return m.first == n; });
      out += it == r.metrics.end() ? fmt::format("{:>14}", "-") : fmt::format("{:>14.6g}", it->second);
    }
    out += "\n";
  }
  if (!s.metrics.empty()) {
    out += fmt::format("{:<30}", "mean");
    for (const auto& m : s.metrics) out += fmt::format("{:>14.6g}", m.mean);
    out += "\n" + fmt::format("{:<30}", "std (ddof 1)");
    for (const auto& m : s.metrics) out += fmt::format("{:>14.6g}", m.std);
    out += "\n";
    const MetricSummary& first = s.metrics.front();
    out += fmt::format("{} = {:.4f} +- {:.4f} (mean +- sample std, ddof 1, over {} folds){}\n", first.name, first.mean, first.std,
                       first.values.size(), first.name == s.monitor ? "; * the task's monitored metric" : "");
  }
  if (s.interrupted) out += fmt::format("interrupted after {} of {} folds\n", s.results.size(), s.folds);
  out += fmt::format("folds in {}/fold-<k>/, summary in {}\n", s.dir.string(), (s.dir / "cv.json").string());
  return out;
}

nlohmann::json cv_json(const CvSummary& s) {
  nlohmann::json j = {{"folds", s.folds},         {"samples", s.samples},  {"stratified", s.stratified},
                      {"dataset", s.dataset},     {"monitor", s.monitor},  {"std_ddof", 1},
                      {"interrupted", s.interrupted}, {"per_fold", nlohmann::json::array()}, {"summary", nlohmann::json::object()}};
  for (const auto& r : s.results) {
    nlohmann::json m = nlohmann::json::object();
    for (const auto& [n, v] : r.metrics) m[n] = v;
    j["per_fold"].push_back({{"fold", r.fold},
                             {"run_dir", r.run_dir.string()},
                             {"train_samples", r.train_samples},
                             {"val_samples", r.val_samples},
                             {"steps", r.steps},
                             {"seconds", r.seconds},
                             {"metrics", m}});
  }
  for (const auto& m : s.metrics) j["summary"][m.name] = {{"mean", m.mean}, {"std", m.std}, {"values", m.values}};
  if (!s.metrics.empty() && s.metrics.front().name == s.monitor) {
    j["mean"] = s.metrics.front().mean;
    j["std"] = s.metrics.front().std;
  }
  return j;
}

}  // namespace bellows::lab
