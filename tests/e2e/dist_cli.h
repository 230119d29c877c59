// The distributed CLI tests' shared pieces (dist_cli_test.cpp, dist_sharded_cli_test.cpp): the CSV they train on,
// the arguments of their MLP and transformer runs, and what a run left behind (its newest checkpoint, its records).
#pragma once

#include <ATen/ATen.h>
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "bellows/ckpt/checkpoint.h"

// A namespace of its own: the e2e tests are compiled as a unity build, beside other files' helpers.
namespace bellows::testing::dist_cli {

namespace fs = std::filesystem;

// 96 rows of 4 features and y = sum of features; `poison`: a row whose first feature overflows fp16.
inline fs::path dist_write_csv(const fs::path& dir, int poison = -1) {
  std::string s = "f0,f1,f2,f3,y\n";
  for (int r = 0; r < 96; ++r) {
    double y = 0;
    for (int f = 0; f < 4; ++f) {
      const double v = r == poison && f == 0 ? 1e6 : ((r * 31 + f * 17) % 23) / 23.0 - 0.5;
      y += v;
      s += fmt::format("{},", v);
    }
    s += fmt::format("{}\n", y);
  }
  std::ofstream(dir / "data.csv") << s;
  return dir / "data.csv";
}

inline std::string dist_args(const fs::path& csv, const fs::path& out, const std::string& name, int batch,
                             const std::string& extra) {
  return fmt::format(
      "train output_dir={} name={} data.source=csv data.path={} data.csv.targets=[y] data.batch_size={} "
      "data.val_fraction=0.25 model.name=mlp model.in_features=4 model.hidden=[16] model.out_features=1 "
      "train.epochs=20 train.max_steps=12 train.log_every_n_steps=4 train.eval_every_n_steps=6 checkpoint.at_end=true "
      "threads=1 data.workers=0 {}",
      out.string(), name, csv.string(), batch, extra);
}

// The newest checkpoint (step-XXXXXXXXX names sort by step), whole or sharded.
inline bellows::ckpt::Checkpoint dist_newest_checkpoint(const fs::path& run) {
  fs::path newest;
  for (const auto& e : fs::directory_iterator(run / "checkpoints")) {
    if (fs::exists(e.path() / "manifest.json") && e.path().filename() > newest.filename()) newest = e.path();
  }
  if (newest.empty()) {
    ADD_FAILURE() << "no checkpoint in " << run;
    return {};
  }
  return bellows::ckpt::load_checkpoint(newest);
}

// The newest checkpoint's weights.
inline std::map<std::string, at::Tensor> dist_final_weights(const fs::path& run) {
  return dist_newest_checkpoint(run).model;
}

inline std::vector<nlohmann::json> dist_records(const fs::path& run, const std::string& type) {
  std::vector<nlohmann::json> out;
  std::ifstream in(run / "metrics.jsonl");
  for (std::string line; std::getline(in, line);) {
    const auto j = nlohmann::json::parse(line);
    if (j.value("type", "") == type) out.push_back(j);
  }
  return out;
}

inline double dist_max_relative_difference(const std::map<std::string, at::Tensor>& a,
                                           const std::map<std::string, at::Tensor>& b) {
  EXPECT_EQ(a.size(), b.size());
  double worst = 0;
  for (const auto& [name, t] : a) {
    const at::Tensor& u = b.at(name);
    worst = std::max(worst, ((t - u).abs().max() / (u.abs().max() + 1e-12)).item<double>());
  }
  return worst;
}

// A transformer (two layers, the blocks fsdp gathers) on sliding windows of the same series: a config file of its own
// (the embedded demo's model keys are the MLP's).
inline std::string transformer_args(const fs::path& csv, const fs::path& out, const std::string& name,
                                    const std::string& extra) {
  const fs::path config = out / "transformer.yaml";
  std::ofstream(config)
      << "model:\n  name: transformer\n  in_features: 4\n  d_model: 16\n  heads: 2\n  layers: 2\n  ff: 32\n"
         "  dropout: 0\n  max_len: 8\n  pooling: last\n  out_features: 1\n";
  return fmt::format(
      "train {} output_dir={} name={} data.source=csv data.path={} data.csv.targets=[y] data.window.length=8 "
      "data.window.horizon=1 data.batch_size=8 data.val_fraction=0.25 precision=fp32 data.shuffle=true "
      "train.epochs=100000 train.log_every_n_steps=2 train.eval_every_n_steps=3 checkpoint.at_end=true threads=1 "
      "data.workers=0 {}",
      config.string(), out.string(), name, csv.string(), extra);
}

}  // namespace bellows::testing::dist_cli
