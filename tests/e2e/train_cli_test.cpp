// End-to-end `bellows train` and `bellows config show`: outputs, run directory, config errors (exit 2),
// and Ctrl-C stopping at a step boundary.
#include <ATen/ATen.h>
#include <gtest/gtest.h>
#include <torch/csrc/jit/api/module.h>
#include <yaml-cpp/yaml.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "bellows/data/npy.h"
#include "run_cli.h"

namespace {

namespace fs = std::filesystem;

using Result = bellows::testing::CliResult;
using bellows::testing::slurp;

fs::path scratch() { return bellows::testing::scratch_dir("bellows_train"); }
Result run(const std::string& args, const std::string& prefix = "") { return bellows::testing::run_cli(args, prefix); }

fs::path write(const fs::path& dir, const std::string& name, const std::string& text) {
  std::ofstream(dir / name) << text;
  return dir / name;
}

TEST(TrainCli, DemoTrainsAndWritesTheRunDirectory) {
  const fs::path out = scratch();
  const Result r = run("train --max-steps 60 --output-dir " + out.string() + " train.log_every_n_steps=10 threads=1");
  ASSERT_EQ(r.code, 0) << r.err << r.out;
  for (const char* expected : {"machine", "precision", "device", "workers", "run finished", "optimizer steps   60",
                               "the training step waited for batches"}) {
    EXPECT_NE(r.out.find(expected), std::string::npos) << expected << "\n" << r.out;
  }
  const fs::path run_dir = out / "demo";
  for (const char* file : {"config.resolved.yaml", "plan.json", "metrics.jsonl"}) EXPECT_TRUE(fs::exists(run_dir / file)) << file;
  // The loss goes down: the first logged window against the last.
  std::ifstream metrics(run_dir / "metrics.jsonl");
  std::vector<double> losses;
  for (std::string line; std::getline(metrics, line);) {
    const auto j = nlohmann::json::parse(line);
    if (j["type"] == "train") losses.push_back(j["loss"].get<double>());
  }
  ASSERT_GE(losses.size(), 5u);
  EXPECT_LT(losses.back(), 0.6 * losses.front());
  const auto plan = nlohmann::json::parse(slurp(run_dir / "plan.json"));
  EXPECT_EQ(plan["device"], "cpu");
  EXPECT_EQ(plan["threads"], 1);
  EXPECT_GE(plan["workers"].get<int>(), 1);  // planned: loading overlaps compute
  // A second run with the same name does not overwrite the first.
  const Result again = run("train --max-steps 5 --output-dir " + out.string() + " threads=1");
  ASSERT_EQ(again.code, 0) << again.err;
  EXPECT_TRUE(fs::exists(out / "demo-2" / "metrics.jsonl"));
}

// A plain line carries the numbers a person reads; metrics.jsonl keeps every field of the same records (the memory
// breakdown once made the line about 450 characters). --max-steps without train.epochs (the demo sets 3) trains to
// max_steps: one epoch of 231 batches is planned.
TEST(TrainCli, PlainLinesWhenNotATerminal) {
  const fs::path out = scratch();
  const Result r = run("train --max-steps 20 --output-dir " + out.string() + " train.log_every_n_steps=10 threads=1");
  ASSERT_EQ(r.code, 0) << r.err;
  const std::size_t at = r.out.find("epoch 1/1 batch 20/231 step 20 loss");
  ASSERT_NE(at, std::string::npos) << r.out;
  EXPECT_NE(r.out.find("epoch 1/1 batch 10/231 step 10 loss"), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find('\r'), std::string::npos) << "no progress-bar redraws in a pipe";
  const std::string line = r.out.substr(at, r.out.find('\n', at) - at);
  EXPECT_LT(line.size(), 140u) << line;
  for (const char* shown : {" lr ", " samples/s ", " ms/step", " grad_norm ", " mem_peak_mb "}) {
    EXPECT_NE(line.find(shown), std::string::npos) << shown << " not in " << line;
  }
  for (const char* left_out : {"mem_mb", "mem_weights_mb", "rss_mb", "gflops", "mfu", "(data "}) {
    EXPECT_EQ(line.find(left_out), std::string::npos) << left_out << " in " << line;
  }
  std::ifstream metrics(out / "demo" / "metrics.jsonl");
  nlohmann::json last;
  for (std::string l; std::getline(metrics, l);) {
    if (const auto j = nlohmann::json::parse(l); j["type"] == "train") last = j;
  }
  for (const char* key : {"mem_mb", "mem_peak_mb", "mem_weights_mb", "mem_optim_mb", "rss_mb", "rss_peak_mb", "gflops", "time_forward_ms"}) {
    EXPECT_TRUE(last.contains(key)) << key << " missing from " << last.dump();
  }
}

TEST(TrainCli, ConfigShowAppliesOverridesAndAliases) {
  const Result r = run("config show --epochs 7 optim.lr=3e-4 --batch-size=64");
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("epochs: 7"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("lr: 3e-4"), std::string::npos) << r.out;  // the override's own spelling
  EXPECT_NE(r.out.find("batch_size: 64"), std::string::npos) << r.out;
}

TEST(TrainCli, ConfigFileComposesExperimentAndProfile) {
  const fs::path dir = scratch();
  write(dir, "experiment.yaml", "train:\n  epochs: 9\noptim:\n  lr: 0.5\n");
  write(dir, "cpu.yaml", "threads: 1\noptim:\n  lr: 0.25\n");
  const fs::path run_yaml = write(dir, "run.yaml", "experiment: experiment.yaml\nhardware_profile: cpu.yaml\nname: composed\n");
  const Result r = run("config show " + run_yaml.string() + " --lr 0.125");
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("epochs: 9"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("lr: 0.125"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("threads: 1"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("name: composed"), std::string::npos) << r.out;
}

TEST(TrainCli, UnknownKeySuggestsAndExits2) {
  const Result r = run("train optim.lrr=0.1");
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find("optim.lrr"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("optim.lr"), std::string::npos) << r.err;
  EXPECT_EQ(r.out.find("run finished"), std::string::npos) << "nothing started";
}

TEST(TrainCli, ConfigFileErrorsNameFileAndLine) {
  const fs::path dir = scratch();
  const fs::path bad = write(dir, "bad.yaml", "name: x\ntrain:\n  epochs: many\n");
  const Result r = run("train " + bad.string());
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find("bad.yaml:3"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("train.epochs"), std::string::npos) << r.err;
  const Result range = run("train --batch-size 0");
  EXPECT_EQ(range.code, 2);
  EXPECT_NE(range.err.find("data.batch_size"), std::string::npos) << range.err;
  const Result missing = run("train " + (dir / "nope.yaml").string());
  EXPECT_EQ(missing.code, 2);
  EXPECT_NE(missing.err.find("nope.yaml"), std::string::npos) << missing.err;
  const Result flag = run("train --batch-sise 8");
  EXPECT_EQ(flag.code, 2);
  EXPECT_NE(flag.err.find("--batch-size"), std::string::npos) << flag.err;
}

TEST(TrainCli, UnusableDeviceIsAResourceError) {
  if (std::system("nvidia-smi >/dev/null 2>&1") == 0) GTEST_SKIP() << "a GPU driver is present";
  const Result r = run("train --device cuda --max-steps 1 --output-dir " + scratch().string());
  EXPECT_EQ(r.code, 4) << r.err;
  EXPECT_NE(r.err.find("CUDA is not usable"), std::string::npos) << r.err;
}

// A model that cannot be allocated (a hidden layer of 10^11 units: 25.6 TB of weights) is a resource error, exit 4
// with the out-of-memory hint, and leaves no run directory half-made.
TEST(TrainCli, OutOfMemoryIsAResourceErrorWithAHint) {
  const fs::path out = scratch();
  const Result r = run("train model.hidden=[100000000000] --output-dir " + out.string());
  EXPECT_EQ(r.code, 4) << r.err;
  EXPECT_NE(r.err.find("resource error: out of memory"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("---> HINT: reduce data.batch_size"), std::string::npos) << r.err;
  EXPECT_FALSE(fs::exists(out / "demo" / "checkpoints")) << "nothing trained, nothing to checkpoint";
}

// Fault injection through the data: one NaN in the features of sample 70 (the third batch of 32). The step's
// gradients are not finite: the run stops at the record with exit 3, naming the step and the first parameter;
// with train.on_nonfinite=skip it trains on and says the same.
TEST(TrainCli, ANaNInTheDataStopsTheRunNamingTheStepAndTheParameter) {
  const fs::path dir = scratch();
  at::Tensor x = at::sin(at::arange(256 * 8, at::kFloat).reshape({256, 8}));
  x[70][3] = NAN;
  bellows::data::write_npy(dir / "x.npy", x);
  bellows::data::write_npy(dir / "y.npy", x.sum(1, true));
  const std::string args = "train data.source=npy data.path=" + (dir / "x.npy").string() + " data.npy.y=" + (dir / "y.npy").string() +
                           " model.in_features=8 data.shuffle=false data.val_fraction=0 data.batch_size=32 train.epochs=2 threads=1 "
                           "--output-dir " + (dir / "runs").string();
  const Result stopped = run(args);
  EXPECT_EQ(stopped.code, 3) << stopped.err;
  EXPECT_NE(stopped.err.find("non-finite gradients: the first at optimizer step 3, in the gradient of layers.0.weight (NaN)"),
            std::string::npos) << stopped.err;
  EXPECT_NE(stopped.err.find("HINT:"), std::string::npos);
  const Result skipped = run(args + " train.on_nonfinite=skip");
  EXPECT_EQ(skipped.code, 0) << skipped.err;
  EXPECT_NE(skipped.out.find("skipped: non-finite gradients (the first at optimizer step 3, in the gradient of layers.0.weight (NaN))"),
            std::string::npos) << skipped.out;
}

// Fault injection: the disk fills during a checkpoint. A file-size limit (ulimit -f: writes past it fail with
// EFBIG, as on a full disk) below one checkpoint's weights: the resumed run's first checkpoint cannot be written.
// The run stops with exit 4 naming the file, the earlier checkpoints still verify, and nothing half-written is
// left in the checkpoint directory.
TEST(TrainCli, ADiskFullDuringACheckpointStopsWithExit4AndKeepsTheLastOne) {
  const fs::path out = scratch();
  const std::string args = "train --output-dir " + out.string() + " threads=1 checkpoint.every_n_steps=20 train.log_every_n_steps=20";
  ASSERT_EQ(run(args + " train.max_steps=40").code, 0);
  const fs::path checkpoints = out / "demo" / "checkpoints";
  // 200 blocks (100 or 200 KiB as the shell counts them): above the run's text files, below the 330 KB of weights.
  const Result full = run(args + " train.max_steps=100 --resume auto", "ulimit -f 200;");
  EXPECT_EQ(full.code, 4) << full.err;
  EXPECT_NE(full.err.find("resource error:"), std::string::npos) << full.err;
  EXPECT_NE(full.err.find("model.safetensors"), std::string::npos) << full.err;
  EXPECT_NE(full.err.find("File too large"), std::string::npos) << full.err;
  const Result inspect = run("ckpt inspect " + checkpoints.string() + " --json");
  ASSERT_EQ(inspect.code, 0) << inspect.err;
  EXPECT_EQ(nlohmann::json::parse(inspect.out)["manifest"]["step"], 40);
  for (const auto& e : fs::directory_iterator(checkpoints)) {
    EXPECT_EQ(e.path().filename().string().rfind(".tmp", 0), std::string::npos) << "left behind: " << e.path();
  }
}

TEST(TrainCli, InterruptStopsAtAStepBoundary) {
  const fs::path out = scratch();
  // SIGINT once the run has logged a step, in a run that would take far longer.
  const Result r = bellows::testing::run_cli_signalled_when(
      "train --epochs 1000 --output-dir " + out.string() + " threads=1 checkpoint.enabled=false",
      [&] { return bellows::testing::has_record(out / "demo" / "metrics.jsonl"); });
  EXPECT_EQ(r.code, 130) << r.err << r.out;
  EXPECT_NE(r.err.find("interrupted at optimizer step"), std::string::npos) << r.err;
  EXPECT_NE(r.out.find("run interrupted"), std::string::npos) << r.out;
  // The metrics file ends with a complete record of the run's end.
  std::ifstream metrics(out / "demo" / "metrics.jsonl");
  std::string line, last;
  while (std::getline(metrics, line)) last = line;
  const auto j = nlohmann::json::parse(last);
  EXPECT_EQ(j["type"], "end");
  EXPECT_EQ(j["interrupted"], true);
}

TEST(TrainCli, InterruptWritesACheckpointExits5AndResumeAutoFinishes) {
  const fs::path out = scratch();
  // SIGINT once the run has logged a step: the step finishes, a checkpoint is written, exit code 5.
  const std::string args = "train --epochs 30 --output-dir " + out.string() + " threads=1 train.log_every_n_steps=50";
  const Result r = bellows::testing::run_cli_signalled_when(args, [&] { return bellows::testing::has_record(out / "demo" / "metrics.jsonl"); });
  ASSERT_EQ(r.code, 5) << r.err << r.out;
  EXPECT_NE(r.err.find("checkpoint written to"), std::string::npos) << r.err;
  const fs::path checkpoints = out / "demo" / "checkpoints";
  ASSERT_TRUE(fs::exists(checkpoints));
  const Result inspect = run("ckpt inspect " + checkpoints.string() + " --json");
  ASSERT_EQ(inspect.code, 0) << inspect.err;
  const auto j = nlohmann::json::parse(inspect.out);
  const std::int64_t stopped_at = j["manifest"]["step"].get<std::int64_t>();
  EXPECT_GT(stopped_at, 0);
  EXPECT_EQ(j["manifest"]["info"]["reason"], "stop");
  // Resume in the same run directory and finish: 30 epochs of 231 batches.
  const Result resumed = run(args + " --resume auto");
  ASSERT_EQ(resumed.code, 0) << resumed.err << resumed.out;
  EXPECT_NE(resumed.out.find("resumed from"), std::string::npos) << resumed.out;
  EXPECT_NE(resumed.out.find("optimizer steps   6930"), std::string::npos) << resumed.out;
  EXPECT_FALSE(fs::exists(out / "demo-2"));
}

TEST(TrainCli, InitWeightsAndAPrecisionSwitchOnResume) {
  const fs::path out = scratch();
  const std::string base = "train --output-dir " + out.string() + " threads=1 train.max_steps=30 train.log_every_n_steps=10";
  ASSERT_EQ(run(base + " precision=fp32").code, 0);
  const fs::path first = out / "demo" / "checkpoints" / "step-000000030";
  ASSERT_TRUE(fs::exists(first));
  // Exported weights initialise a new run by name; a wrong shape is listed.
  ASSERT_EQ(run("ckpt export " + first.string() + " --to " + (out / "w.safetensors").string()).code, 0);
  const Result init = run(base + " --name init init_weights=" + (out / "w.safetensors").string());
  ASSERT_EQ(init.code, 0) << init.err;
  EXPECT_NE(init.out.find("loaded weights from"), std::string::npos) << init.out;
  // Messages from before the run starts reach metrics.jsonl too, and so do the plan's rows.
  bool message_recorded = false, plan_recorded = false;
  std::ifstream init_metrics(out / "init" / "metrics.jsonl");
  for (std::string line; std::getline(init_metrics, line);) {
    const auto j = nlohmann::json::parse(line);
    if (j["type"] == "message" && j["text"].get<std::string>().starts_with("loaded weights from")) message_recorded = true;
    if (j["type"] == "start" && j["header"].contains("precision") && j["header"].contains("checkpointing")) plan_recorded = true;
  }
  EXPECT_TRUE(message_recorded);
  EXPECT_TRUE(plan_recorded);
  const Result wrong = run(base + " --name wrong model.hidden=[32] init_weights=" + (out / "w.safetensors").string());
  EXPECT_EQ(wrong.code, 3) << wrong.err;
  EXPECT_NE(wrong.err.find("in the file, [32, 64] in the model"), std::string::npos) << wrong.err;
  // Resuming an fp32 checkpoint under bf16-mixed continues with a warning.
  const Result switched = run("train --output-dir " + out.string() + " threads=1 train.max_steps=40 train.log_every_n_steps=10"
                              " precision=bf16-mixed --resume " + first.string());
  ASSERT_EQ(switched.code, 0) << switched.err << switched.out;
  EXPECT_NE(switched.out.find("written under precision fp32, this run uses bf16-mixed"), std::string::npos) << switched.out;
  EXPECT_NE(switched.out.find("optimizer steps   40"), std::string::npos) << switched.out;
}

// data.on_device (the CPU twin): the demo's synthetic table, split into training and validation data, trains to the
// same losses, bitwise, with its batches gathered from the data placed on the device as through the loader; the plan
// says which and why, and auto leaves the data with the loader on the CPU.
TEST(TrainCli, DataOnTheDeviceTrainsAsTheLoaderBitwise) {
  const fs::path out = scratch();
  auto records = [&](const std::string& name) {
    std::vector<std::string> lines;
    std::ifstream metrics(out / name / "metrics.jsonl");
    for (std::string line; std::getline(metrics, line);) {
      const auto j = nlohmann::json::parse(line);
      if (j["type"] == "train") lines.push_back(j["loss"].dump());
      if (j["type"] == "eval") lines.push_back("eval " + j["loss"].dump());
    }
    return lines;
  };
  const std::string common = " --max-steps 40 --output-dir " + out.string() + " train.log_every_n_steps=5 threads=1 train.eval_every_n_steps=20";
  const Result loader = run("train --name loader data.on_device=auto" + common);
  ASSERT_EQ(loader.code, 0) << loader.err << loader.out;
  const Result device = run("train --name device data.on_device=true data.workers=2" + common);
  ASSERT_EQ(device.code, 0) << device.err << device.out;
  const std::vector<std::string> a = records("loader"), b = records("device");
  ASSERT_GE(a.size(), 9u);
  EXPECT_EQ(a, b);
  const auto on = nlohmann::json::parse(slurp(out / "device" / "plan.json"));
  EXPECT_EQ(on["on_device"], "true");
  EXPECT_EQ(on["workers"], 0);  // gathered in the training thread, whatever data.workers asked
  const auto off = nlohmann::json::parse(slurp(out / "loader" / "plan.json"));
  EXPECT_EQ(off["on_device"], "false");
  for (const auto& e : off["entries"]) {
    if (e["key"] == "on_device") EXPECT_NE(e["reason"].get<std::string>().find("the device is the host"), std::string::npos) << e;
  }
  EXPECT_NE(device.out.find("kept on the device, batches gathered there (data.on_device)"), std::string::npos) << device.out;
}



// Issue 44: `rows` rows of "a,b,y" with class labels 0..2 in y; `bad_row` (>= 0) holds label 7 instead.
std::string labelled_table(int rows, int bad_row = -1) {
  std::string s = "a,b,y\n";
  for (int r = 0; r < rows; ++r) s += std::to_string(0.1 * r) + "," + std::to_string(0.05 * r) + "," + std::to_string(r == bad_row ? 7 : r % 3) + "\n";
  return s;
}

const std::string kClassifier = " data.source=csv data.csv.targets=[y] data.csv.integer=[y] model.name=mlp model.task=classification "
                                "model.in_features=2 model.out_features=3 model.hidden=[8] data.batch_size=8 data.shuffle=false threads=1 ";

// Issue 44: an error in an evaluation (a label the head cannot take, in a validation batch the trial step before
// training does not see) ended the run as an internal error and lost the steps since the last checkpoint. It is an
// input data error now that names the evaluation, the step and the batch's shapes, and the step the run completed
// is saved first: a checkpoint that verifies.
TEST(TrainCli, AnErrorInAnEvaluationSavesTheLastCompletedStepFirst) {
  const fs::path dir = scratch();
  write(dir, "train.csv", labelled_table(40));
  write(dir, "val.csv", labelled_table(24, /*bad_row=*/12));
  const Result r = run("train" + kClassifier + "data.path=" + (dir / "train.csv").string() + " data.val_path=" + (dir / "val.csv").string() +
                       " train.max_steps=6 train.eval_every_n_steps=3 checkpoint.every_n_steps=0 --output-dir " + (dir / "runs").string());
  EXPECT_EQ(r.code, 3) << r.err;
  for (const char* expected : {"the evaluation after optimizer step 3 failed on a batch of x Float [8, 2], y Long [8]",
                               "Target 7 is out of bounds", "optimizer step 3, complete before the error, was saved first",
                               "resume=auto continues from it"}) {
    EXPECT_NE(r.err.find(expected), std::string::npos) << expected << "\n" << r.err;
  }
  const fs::path saved = dir / "runs" / "demo" / "checkpoints" / "step-000000003";
  ASSERT_TRUE(fs::exists(saved / "manifest.json")) << r.err;
  const Result inspect = run("ckpt inspect " + saved.string());
  EXPECT_EQ(inspect.code, 0) << inspect.err;
}

// Issue 44: train.max_steps without train.epochs trained one epoch (the default) and stopped there; it trains to
// max_steps now, over as many epochs as that takes, and the plan's length row says which limit ends the run.
TEST(TrainCli, MaxStepsWithoutEpochsTrainsToMaxSteps) {
  const fs::path dir = scratch();
  write(dir, "train.csv", labelled_table(40));  // 5 batches of 8 per epoch
  const std::string config = write(dir, "run.yaml", "name: cls\ntrain:\n  max_steps: 12\n").string();
  const std::string args = "train " + config + kClassifier + "data.path=" + (dir / "train.csv").string() + " data.val_fraction=0 ";
  const Result to_max = run(args + "--output-dir " + (dir / "a").string());
  ASSERT_EQ(to_max.code, 0) << to_max.err;
  EXPECT_NE(to_max.out.find("optimizer steps   12"), std::string::npos) << to_max.out;
  EXPECT_NE(to_max.out.find("train.max_steps 12 ends the run (train.epochs not set in the config: as many epochs as it takes, 3); "
                            "5 optimizer step(s) per epoch (5 batches)"), std::string::npos) << to_max.out;
  const Result by_epochs = run(args + "train.epochs=2 --output-dir " + (dir / "b").string());
  ASSERT_EQ(by_epochs.code, 0) << by_epochs.err;
  EXPECT_NE(by_epochs.out.find("optimizer steps   10"), std::string::npos) << by_epochs.out;
  EXPECT_NE(by_epochs.out.find("train.epochs 2 ends the run before train.max_steps 12 would"), std::string::npos) << by_epochs.out;
  const auto plan = nlohmann::json::parse(slurp(dir / "b" / "cls" / "plan.json"));
  std::string length;
  for (const auto& entry : plan.value("entries", nlohmann::json::array())) {
    if (entry.value("key", "") == "length") length = entry.value("value", "");
  }
  EXPECT_EQ(length, "10 steps") << plan.dump();
}

// Issue 44: resuming a run that had finished printed "final train loss 0" and "epochs completed 0 of 3"; it says the
// run is complete, with the last numbers of the checkpoint, and writes no checkpoint again.
TEST(TrainCli, ResumingAFinishedRunSaysItIsCompleteWithItsLastNumbers) {
  const fs::path dir = scratch();
  write(dir, "train.csv", labelled_table(40));
  const std::string args = "train" + kClassifier + "data.path=" + (dir / "train.csv").string() +
                           " data.val_fraction=0.2 train.epochs=2 --output-dir " + (dir / "runs").string();
  const Result first = run(args);
  ASSERT_EQ(first.code, 0) << first.err;
  const auto loss_line = [](const std::string& out) {
    const auto at = out.find("final train loss");
    return at == std::string::npos ? std::string() : out.substr(at, out.find('\n', at) - at);
  };
  ASSERT_NE(loss_line(first.out), "") << first.out;
  const Result again = run(args + " resume=auto");
  ASSERT_EQ(again.code, 0) << again.err;
  EXPECT_NE(again.out.find("already complete    the checkpoint resumed is at optimizer step 8"), std::string::npos) << again.out;
  EXPECT_EQ(loss_line(again.out), loss_line(first.out)) << again.out;
  EXPECT_NE(again.out.find("epochs completed    2 of 2"), std::string::npos) << again.out;
  EXPECT_NE(again.out.find("last eval accuracy"), std::string::npos) << again.out;
  EXPECT_EQ(again.out.find("checkpoint " + (dir / "runs").string()), std::string::npos) << "wrote a checkpoint again:\n" << again.out;
}

// Issue 44: one rule for every path key (docs/training.md, "Paths in a config"). A config in a subdirectory names its
// data, its targets, a TorchScript model and its outputs relative to itself, and trains from another working
// directory; the same keys on the command line go by the working directory; the resolved config holds absolute
// paths, so that a resume and `bellows predict` from a third directory find every file.
TEST(TrainCli, RelativePathsGoByTheFileThatSetThem) {
  const fs::path dir = scratch(), exp = dir / "exp", elsewhere = dir / "elsewhere", cli = dir / "cli";
  for (const fs::path& d : {exp / "data", elsewhere, cli / "data"}) fs::create_directories(d);
  const at::Tensor x = at::sin(at::arange(64 * 4, at::kFloat).reshape({64, 4}));
  bellows::data::write_npy(exp / "data" / "x.npy", x);
  bellows::data::write_npy(exp / "data" / "y.npy", x.sum(1, true));
  bellows::data::write_npy(cli / "data" / "x.npy", 2 * x);  // the same relative name, beside the working directory
  torch::jit::Module linear("Linear");  // a user's scripted model, as torch.jit.script(...).save writes it
  linear.register_parameter("w", at::full({4, 1}, 0.1).requires_grad_(), false);
  linear.register_parameter("b", at::zeros({1}).requires_grad_(), false);
  linear.define("def forward(self, x):\n    return torch.matmul(x, self.w) + self.b\n");
  linear.save((exp / "m.pt").string());
  write(exp, "run.yaml",
        "name: paths\noutput_dir: out\nthreads: 1\ntrain: {max_steps: 2}\n"
        "data:\n  source: npy\n  path: data/x.npy\n  npy: {y: data/y.npy}\n  batch_size: 8\n  val_fraction: 0\n"
        "model:\n  name: torchscript\n  path: m.pt\n");
  const auto in = [](const fs::path& d) { return "cd '" + d.string() + "' &&"; };
  const auto resolved = [](const fs::path& run_dir) { return YAML::LoadFile((run_dir / "config.resolved.yaml").string()); };

  const Result from_file = run("train ../exp/run.yaml", in(elsewhere));
  ASSERT_EQ(from_file.code, 0) << from_file.err << from_file.out;
  const fs::path run_dir = exp / "out" / "paths";  // output_dir: out, beside the config as well
  const YAML::Node c = resolved(run_dir);
  EXPECT_EQ(c["data"]["path"].as<std::string>(), (exp / "data" / "x.npy").string());
  EXPECT_EQ(c["data"]["npy"]["y"].as<std::string>(), (exp / "data" / "y.npy").string());
  EXPECT_EQ(c["model"]["path"].as<std::string>(), (exp / "m.pt").string());
  EXPECT_EQ(c["output_dir"].as<std::string>(), (exp / "out").string());
  EXPECT_FALSE(fs::exists(elsewhere / "out"));

  // The command line's relative paths start at the working directory.
  const Result from_cli = run("train ../exp/run.yaml data.path=data/x.npy data.npy.y=../exp/data/y.npy --output-dir runs", in(cli));
  ASSERT_EQ(from_cli.code, 0) << from_cli.err << from_cli.out;
  const YAML::Node from_cli_config = resolved(cli / "runs" / "paths");
  EXPECT_EQ(from_cli_config["data"]["path"].as<std::string>(), (cli / "data" / "x.npy").string());
  EXPECT_EQ(from_cli_config["data"]["npy"]["y"].as<std::string>(), (exp / "data" / "y.npy").string());
  EXPECT_EQ(from_cli_config["model"]["path"].as<std::string>(), (exp / "m.pt").string());  // still the file's
  EXPECT_EQ(from_cli_config["output_dir"].as<std::string>(), (cli / "runs").string());

  // The run's resolved config resumes from anywhere, and predict finds the model through the checkpoint's config.
  const Result resumed = run("train '" + (run_dir / "config.resolved.yaml").string() + "' resume=auto train.max_steps=3", in(dir));
  ASSERT_EQ(resumed.code, 0) << resumed.err << resumed.out;
  EXPECT_NE(resumed.out.find("resumed from " + (run_dir / "checkpoints" / "step-000000002").string()), std::string::npos) << resumed.out;
  EXPECT_NE(resumed.out.find("optimizer steps   3"), std::string::npos) << resumed.out;
  const Result predicted = run("predict '" + run_dir.string() + "' --input ../exp/data/x.npy --output p.npy", in(elsewhere));
  ASSERT_EQ(predicted.code, 0) << predicted.err << predicted.out;
  EXPECT_TRUE(fs::exists(elsewhere / "p.npy"));

  // A missing file: the path as written, where it was looked for, and why there.
  const Result missing = run("train ../exp/run.yaml data.path=data/nope.npy", in(elsewhere));
  EXPECT_EQ(missing.code, 3) << missing.err;
  EXPECT_NE(missing.err.find("command line 'data.path=data/nope.npy': data.path 'data/nope.npy' does not exist: looked for " +
                             (elsewhere / "data" / "nope.npy").string() + " (relative to the working directory, " + elsewhere.string() + ")"),
            std::string::npos)
      << missing.err;
}

// Issue 44: a config file saved with Windows line endings trains like its LF twin. Every line ends in "\r\n" (a
// comment, a quoted string, a string checked against choices, a block list and a flow list among them); with one
// thread and a fixed seed both runs end at the same losses, and their resolved configs are the same text, no value
// keeping a '\r' (the config writer's CR fix, corpus seed tests/fuzz/corpus/config/crlf_value, covers the other way).
TEST(TrainCli, ACrlfConfigTrainsLikeItsLfTwin) {
  const fs::path dir = scratch();
  const std::string lf =
      "# a small run, saved once with LF and once with CRLF line endings\n"
      "name: twin\n"
      "seed: 7\n"
      "threads: 1\n"
      "precision: \"fp32\"   # a quoted string\n"
      "optim:\n"
      "  type: adamw\n"
      "  lr: 0.01\n"
      "model:\n"
      "  hidden:\n"
      "    - 8\n"
      "    - 4\n"
      "data:\n"
      "  samples: 64\n"
      "  batch_size: 8\n"
      "  val_fraction: 0\n"
      "train: {max_steps: 3, log_every_n_steps: 1, freeze: []}\n"
      "plan:\n"
      "  allow: [precision, batch_size]\n";
  std::string crlf;
  for (const char ch : lf) crlf += ch == '\n' ? std::string("\r\n") : std::string(1, ch);
  std::ofstream(dir / "lf.yaml", std::ios::binary) << lf;
  std::ofstream(dir / "crlf.yaml", std::ios::binary) << crlf;
  ASSERT_NE(slurp(dir / "crlf.yaml").find("adamw\r\n"), std::string::npos);

  const std::string out = " --output-dir " + (dir / "runs").string();
  const Result a = run("train " + (dir / "lf.yaml").string() + out), b = run("train " + (dir / "crlf.yaml").string() + out);
  ASSERT_EQ(a.code, 0) << a.err << a.out;
  ASSERT_EQ(b.code, 0) << b.err << b.out;
  const fs::path lf_run = dir / "runs" / "twin", crlf_run = dir / "runs" / "twin-2";  // the same name: the second is -2
  const auto losses = [](const fs::path& run_dir) {
    std::vector<double> out;
    std::ifstream metrics(run_dir / "metrics.jsonl");
    for (std::string line; std::getline(metrics, line);) {
      const auto j = nlohmann::json::parse(line);
      if (j["type"] == "train") out.push_back(j["loss"].get<double>());
    }
    return out;
  };
  ASSERT_EQ(losses(lf_run).size(), 3u);
  EXPECT_EQ(losses(crlf_run), losses(lf_run));  // bitwise: the same run
  const std::string lf_config = slurp(lf_run / "config.resolved.yaml"), crlf_config = slurp(crlf_run / "config.resolved.yaml");
  EXPECT_EQ(crlf_config.find('\r'), std::string::npos) << crlf_config;
  EXPECT_EQ(crlf_config, lf_config);
  EXPECT_NE(crlf_config.find("type: adamw\n"), std::string::npos) << crlf_config;
  EXPECT_NE(crlf_config.find("hidden: [8, 4]\n"), std::string::npos) << crlf_config;
}

}  // namespace
