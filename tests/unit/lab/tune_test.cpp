// The autotuner (lab/tune.h), tuned plans and `--plan`, the optimization matrix (lab/bench_matrix.h) and its chart
// (obs/bar_chart.h). The search is tested on a source whose batches sleep 5 ms in the loading thread (sleepy_source.cpp): loading in
// the training thread is the bottleneck by construction, and two workers halve the step whatever the CPU.
#include <gtest/gtest.h>
#include <stdlib.h>

#include <chrono>
#include <filesystem>
#include <fstream>

#include "bellows/lab/bench_matrix.h"
#include "bellows/app/schema.h"
#include "bellows/lab/trial.h"
#include "bellows/app/tuned_plan.h"
#include "bellows/lab/tune.h"
#include "bellows/hw/hardware_info.h"
#include "bellows/obs/bar_chart.h"
#include "bellows/util/cache.h"
#include "test_util.h"

namespace bellows::lab {
using namespace bellows::app;  // the composition root the tools are built on
namespace {
namespace fs = std::filesystem;

// In a file rather than on the command line: keys given there are the user's, and the tuner leaves them alone.
const char* const kSlowYaml = R"(name: slow
precision: fp32
data:
  source: sleepy_test      # tests/unit/lab/sleepy_source.cpp: 5 ms per batch
  batch_size: 32
  val_fraction: 0
  workers: 0
model:
  name: mlp
  in_features: 16
  hidden: [32]
train:
  epochs: 1
)";

std::vector<std::string> with(std::vector<std::string> a, const std::vector<std::string>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

config::Config slow(const std::vector<std::string>& args = {}, const std::string& more_yaml = "") {
  return resolve_config_text(std::string(kSlowYaml) + more_yaml, "<slow test config>", args);
}

const TuneDimension* dimension(const TuneSpace& s, const std::string& id) {
  for (const auto& d : s.dimensions) {
    if (d.id == id) return &d;
  }
  return nullptr;
}

bool has_note(const std::vector<std::string>& notes, const std::string& part) {
  for (const auto& n : notes) {
    if (n.find(part) != std::string::npos) return true;
  }
  return false;
}

// Points the user cache at a fresh directory for one test.
class CacheDir {
 public:
  CacheDir() {
    if (const char* old = std::getenv("BELLOWS_CACHE")) old_ = old;
    ::setenv("BELLOWS_CACHE", dir_.path().c_str(), 1);
  }
  ~CacheDir() {
    if (old_) ::setenv("BELLOWS_CACHE", old_->c_str(), 1);
    else ::unsetenv("BELLOWS_CACHE");
  }
  const fs::path& path() const { return dir_.path(); }

 private:
  test_support::TempDir dir_{"tune_cache"};
  std::optional<std::string> old_;
};

TEST(TuneSpace, NumericsChangingSettingsOnlyWhenAllowed) {
  const hw::HardwareInfo& hw = hw::HardwareInfo::get();
  const TuneSpace plain = tune_space(resolve_config(std::nullopt, {}), hw);
  EXPECT_EQ(dimension(plain, "precision"), nullptr);
  EXPECT_EQ(dimension(plain, "micro_batch"), nullptr);
  EXPECT_TRUE(has_note(plain.notes, "precision: not searched (it changes the numerics"));
  EXPECT_TRUE(has_note(plain.notes, "channels_last: not searched (model mlp has no 2-D convolutions, whose 4-D tensors channels_last lays out)"));
  const TuneDimension* loader = dimension(plain, "loader");
  ASSERT_NE(loader, nullptr);
  EXPECT_TRUE(loader->values[0].overrides.empty()) << "the configured setting comes first";
  EXPECT_FALSE(loader->changes_numerics);

  const TuneSpace allowed = tune_space(resolve_config(std::nullopt, {"plan.allow=[batch_size, precision]"}), hw);
  const TuneDimension* micro = dimension(allowed, "micro_batch");
  ASSERT_NE(micro, nullptr);  // the demo: batch 256 x 1, so 128 x 2 (and no 512 x 0.5)
  ASSERT_EQ(micro->values.size(), 2u);
  EXPECT_EQ(micro->values[1].overrides, (std::vector<std::string>{"data.batch_size=128", "train.accumulation_steps=2"}));
  EXPECT_TRUE(micro->changes_numerics);
  if (const TuneDimension* precision = dimension(allowed, "precision")) {
    for (const auto& v : precision->values) EXPECT_NE(v.label, "fp16-mixed") << "no fp16 trial on the CPU";
  } else {
    EXPECT_TRUE(has_note(allowed.notes, "bf16-mixed not searched")) << "a CPU without bf16 instructions says why";
  }
  EXPECT_EQ(allowed.grid_size(), loader->values.size() * micro->values.size() * (dimension(allowed, "precision") ? dimension(allowed, "precision")->values.size() : 1));
}

TEST(TuneSpace, CommandLineKeysAreTheUsersAndBadAllowEntriesAreErrors) {
  const hw::HardwareInfo& hw = hw::HardwareInfo::get();
  const TuneSpace s = tune_space(resolve_config(std::nullopt, {"plan.allow=[batch_size]", "data.batch_size=64", "threads=1"}), hw);
  EXPECT_EQ(dimension(s, "micro_batch"), nullptr);
  EXPECT_EQ(dimension(s, "loader"), nullptr);
  EXPECT_TRUE(has_note(s.notes, "micro_batch: not searched (data.batch_size is set on the command line)"));
  EXPECT_TRUE(has_note(s.notes, "loader: not searched (threads is set on the command line)"));
  const Error e = test_support::error_from([&] { tune_space(resolve_config(std::nullopt, {"plan.allow=[precision, speed]"}), hw); });
  EXPECT_EQ(e.kind(), ErrorKind::kConfig);
  EXPECT_NE(e.message().find("plan.allow: 'speed'"), std::string::npos) << e.message();
}

TEST(Trial, AClearLoserStopsEarly) {
  TrialRunner runner(resolve_config(std::nullopt, {"train.max_steps=0"}), "test", nullptr);
  const Trial t = runner.run("loser", {}, 30, 3, false, /*stop_below_samples_per_s=*/1e15);
  EXPECT_TRUE(t.stopped_early);
  EXPECT_LE(t.steps, 5) << "stopped once two steady steps were measured";
  const Trial normal = runner.run("normal", {}, 0.05, 3);
  EXPECT_FALSE(normal.stopped_early);
  EXPECT_GE(normal.steps, 3);
}

TEST(Tune, ASlowLoaderGetsWorkersAndThePlanAppliesThem) {
  const config::Config c = slow();
  TuneOptions o;
  o.budget_s = 40;
  o.trial_seconds = 0.6;
  o.progress = nullptr;
  const TuneReport plan = tune(c, o);
  ASSERT_GE(plan.trials.size(), 2u);
  EXPECT_EQ(plan.trials[0].trial.name, "baseline");
  EXPECT_GT(plan.trials[0].trial.phase_ms[0], 4.0) << "each batch sleeps 5 ms in the training thread";
  // Two workers load two batches at once: about twice the samples/s; the tuner measured and adopted it.
  std::string workers;
  for (const auto& s : plan.overrides) {
    if (s.rfind("data.workers=", 0) == 0) workers = s;
  }
  EXPECT_TRUE(workers == "data.workers=2" || workers == "data.workers=1") << plan.to_text();
  EXPECT_GT(plan.samples_per_s, 1.3 * plan.baseline_samples_per_s) << plan.to_text();
  EXPECT_TRUE(plan.changes_numerics.empty()) << "the loader does not change the numerics";
  bool adopted = false;
  for (const auto& t : plan.trials) adopted = adopted || t.status == "winner";
  EXPECT_TRUE(adopted) << plan.to_text();
  EXPECT_LT(plan.seconds, o.budget_s + 5) << "trials that do not fit the budget are not started";

  // Written, read back, and applied beneath the command line.
  const test_support::TempDir tmp("tune");
  const fs::path file = tmp.path() / "plan.json";
  write_tuned_plan(plan, file);
  const TunedPlan back = read_tuned_plan(file);
  EXPECT_EQ(back.overrides, plan.overrides);
  EXPECT_EQ(back.config_key, tune_config_key(c));
  const config::Config applied = slow({"data.workers=0", "--plan", file.string()});
  EXPECT_EQ(config::get_int(applied, "data.workers"), 0) << "data.workers=0 is on the command line: it wins";
  const config::Config tuned = slow({"--plan=" + file.string()});
  EXPECT_EQ(workers, "data.workers=" + std::to_string(config::get_int(tuned, "data.workers")));
  ASSERT_EQ(tuned.plan_notes().size(), 1u);
  EXPECT_EQ(tuned.plan_notes()[0].key, "tuned");
  EXPECT_NE(tuned.plan_notes()[0].reason.find(workers), std::string::npos) << tuned.plan_notes()[0].reason;
}

TEST(Tune, TheGridMeasuresEveryPoint) {
  const config::Config c = slow({}, "plan:\n  allow: [batch_size]\n");
  TuneOptions o;
  o.grid = true;
  o.trial_seconds = 0.15;
  o.progress = nullptr;
  const TuneReport plan = tune(c, o);
  const TuneSpace space = tune_space(c, hw::HardwareInfo::get());
  // The loader value that repeats the baseline (threads = cores, no workers) is measured once, as the baseline.
  const std::size_t loader = dimension(space, "loader")->values.size() - 1, micro = dimension(space, "micro_batch")->values.size();
  EXPECT_EQ(plan.trials.size(), loader * micro) << plan.to_text();
  double best = 0;
  for (const auto& t : plan.trials) best = std::max(best, t.trial.samples_per_s);
  EXPECT_EQ(plan.samples_per_s, best);
  EXPECT_EQ(plan.mode, "grid");
}

TEST(TunedPlan, AutoTunesOnceThenReusesTheCache) {
  const CacheDir cache;
  const std::vector<std::string> args = {"data.workers=1", "data.prefetch=3"};  // on the command line: not searched
  const config::Config c = slow(args);
  const fs::path cached = cached_plan_path(tune_config_key(c), tune_machine_key(hw::HardwareInfo::get()));
  EXPECT_EQ(cached.parent_path(), cache.path() / "plans");
  // A plan already cached for this config and machine is used as it is: no trial runs.
  TuneReport p;
  p.config_key = tune_config_key(c);
  p.machine_key = tune_machine_key(hw::HardwareInfo::get());
  p.overrides = {"model.hidden=[24]"};
  p.baseline_samples_per_s = 100;
  p.samples_per_s = 150;
  write_tuned_plan(p, cached);
  const auto t0 = std::chrono::steady_clock::now();
  const config::Config reused = slow(with(args, {"--plan", "auto"}));
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), 2.0);
  EXPECT_EQ(reused.node("model.hidden")[0].as<int>(), 24);
  ASSERT_EQ(reused.plan_notes().size(), 1u);
  EXPECT_NE(reused.plan_notes()[0].reason.find("cached plan"), std::string::npos) << reused.plan_notes()[0].reason;
  EXPECT_NE(reused.plan_notes()[0].reason.find("1.50x"), std::string::npos) << reused.plan_notes()[0].reason;
  EXPECT_EQ(reused.plan_notes()[0].reason.find("WARNING"), std::string::npos) << reused.plan_notes()[0].reason;
  // Another config (model.hidden on the command line changes the key): tuned now, then cached.
  const std::vector<std::string> other = with(args, {"model.hidden=[16]", "plan.allow=[]"});
  const fs::path other_cached = cached_plan_path(tune_config_key(slow(other)), p.machine_key);
  ASSERT_FALSE(fs::exists(other_cached));
  const config::Config tuned = slow(with(other, {"--plan", "auto"}));
  EXPECT_TRUE(fs::exists(other_cached));
  EXPECT_NE(tuned.plan_notes()[0].reason.find("tuned now"), std::string::npos) << tuned.plan_notes()[0].reason;
  // A plan tuned elsewhere is applied, with a warning in its plan row.
  TuneReport elsewhere = p;
  elsewhere.machine_key = "0000000000000000";
  elsewhere.machine = "another machine";
  elsewhere.config_key = "1111111111111111";
  const fs::path file = cache.path() / "elsewhere.json";
  write_tuned_plan(elsewhere, file);
  const config::Config warned = slow(with(args, {"--plan", file.string()}));
  EXPECT_NE(warned.plan_notes()[0].reason.find("WARNING: tuned on another machine (another machine)"), std::string::npos);
  EXPECT_NE(warned.plan_notes()[0].reason.find("WARNING: tuned for another config"), std::string::npos);
}

TEST(BenchMatrix, EveryRowMeasuredOrSaysWhyAndTheChartIsWritten) {
  MatrixOptions o;
  o.rounds = 2;
  o.trial_seconds = 0.1;
  o.progress = nullptr;
  const MatrixReport r = bench_matrix(resolve_config(std::nullopt, {"precision=fp32", "data.samples=2048"}), o);
  EXPECT_EQ(r.baseline.trials.size(), 2u);
  EXPECT_GT(r.baseline.median_samples_per_s, 0);
  std::map<std::string, const MatrixRow*> rows;
  for (const auto& row : r.rows) rows[row.id] = &row;
  for (const char* id : {"precision", "workers", "prefetch", "channels_last", "optimizer", "accumulation", "checkpointing", "cudnn_benchmark", "cuda_graphs"}) {
    ASSERT_TRUE(rows.count(id)) << id;
  }
  EXPECT_NE(rows["channels_last"]->skipped.find("not applicable: model mlp has no 2-D convolutions (channels_last lays out their 4-D tensors)"), std::string::npos);
  EXPECT_NE(rows["cuda_graphs"]->skipped.find("CUDA only"), std::string::npos);
  // The MLP has no blocks to checkpoint: its trial says so, and the row does not apply (it said "failed", issue 32).
  EXPECT_EQ(rows["checkpointing"]->skipped.rfind("not applicable: model '", 0), 0u) << rows["checkpointing"]->skipped;
  EXPECT_NE(rows["checkpointing"]->skipped.find("' has no checkpointable blocks"), std::string::npos) << rows["checkpointing"]->skipped;
  EXPECT_TRUE(rows["checkpointing"]->error.empty()) << rows["checkpointing"]->error;
  EXPECT_TRUE(rows["checkpointing"]->trials.empty());
  for (const char* id : {"workers", "optimizer", "accumulation"}) {
    const MatrixRow& row = *rows[id];
    EXPECT_TRUE(row.skipped.empty() && row.error.empty()) << id << ": " << row.skipped << row.error;
    EXPECT_EQ(row.trials.size(), 2u) << id;
    EXPECT_GT(row.speedup, 0) << id;
    EXPECT_LE(row.min_samples_per_s, row.median_samples_per_s);
    EXPECT_GE(row.max_samples_per_s, row.median_samples_per_s);
    EXPECT_DOUBLE_EQ(row.speedup, row.median_samples_per_s / r.baseline.median_samples_per_s);
  }
  EXPECT_EQ(rows["accumulation"]->overrides, (std::vector<std::string>{"data.batch_size=128", "train.accumulation_steps=2"}));
  const nlohmann::json j = r.to_json();
  EXPECT_EQ(j["rows"].size(), r.rows.size());
  EXPECT_NE(r.table().find("the seeds expect"), std::string::npos);

  const test_support::TempDir tmp("matrix_chart");
  const fs::path& dir = tmp.path();
  const obs::BarChart chart = r.chart();
  ASSERT_EQ(chart.rows.size(), r.rows.size());
  obs::write_bar_chart_svg(chart, dir / "m.svg");
  obs::write_bar_chart_png(chart, dir / "m.png");
  std::ifstream png(dir / "m.png", std::ios::binary);
  std::string head(24, '\0');
  png.read(head.data(), 24);
  EXPECT_EQ(head.substr(0, 8), std::string("\x89PNG\r\n\x1a\n", 8));
  const auto be32 = [&](std::size_t at) {
    return (static_cast<unsigned char>(head[at]) << 24) | (static_cast<unsigned char>(head[at + 1]) << 16) |
           (static_cast<unsigned char>(head[at + 2]) << 8) | static_cast<unsigned char>(head[at + 3]);
  };
  EXPECT_EQ(be32(16), 2 * (330 + 2 * 330 + 16)) << "two panels, drawn at twice the SVG's size";
  std::ifstream svg(dir / "m.svg");
  const std::string text((std::istreambuf_iterator<char>(svg)), std::istreambuf_iterator<char>());
  EXPECT_NE(text.find("<svg"), std::string::npos);
  EXPECT_NE(text.find("</svg>"), std::string::npos);
}

TEST(BarChart, AnUnwritableFileIsAResourceError) {
  obs::BarChart chart;
  chart.title = "t";
  chart.panels = {{"x", 1.0}};
  chart.rows = {{"a", {1.5}, {1.2}, {1.7}, {"1.5x"}}};
  const Error e = test_support::error_from([&] { obs::write_bar_chart_png(chart, "/proc/bellows-no-such-dir/x.png"); });
  EXPECT_NE(e.message().find("x.png"), std::string::npos) << e.message();
}

}  // namespace
}  // namespace bellows::lab
