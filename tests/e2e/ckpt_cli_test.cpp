// `bellows ckpt inspect` and `bellows ckpt export` on checkpoints written through the library, whole and sharded; on
// two ranks' sharded checkpoint (zero2) against ddp's whole one of the same weights: the same export, read by Python,
// and the same predictions; resume=auto passing over a broken sharded checkpoint to the newest valid one.
#include <ATen/ATen.h>
#include <fmt/format.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <tuple>

#include "bad_input.h"  // defines: train_demo_checkpoint, the ways a sharded checkpoint breaks
#include "bellows/ckpt/checkpoint.h"
#include "bellows/ckpt/checksum.h"
#include "bellows/ckpt/safetensors.h"
#include "bellows/ckpt/sharded.h"
#include "bellows/data/npy.h"
#include "run_cli.h"

namespace bellows::testing {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

ckpt::Checkpoint sample(std::int64_t step) {
  ckpt::Checkpoint c;
  c.step = step;
  c.epoch = 2;
  c.model["fc.weight"] = at::arange(6, at::kFloat).reshape({2, 3});
  c.model["fc.bias"] = at::zeros({2}, at::kBFloat16);
  c.state["ema.weights.fc.weight"] = at::ones({2, 3});
  put_int(c.state, "counters.step", step);
  put_int(c.state, "counters.samples", 64 * step);
  c.info = {{"config", "name: demo\nseed: 0\n"}, {"metric", 0.125}};
  return c;
}

TEST(CkptCli, InspectListsTensorsCountersAndChecksums) {
  const fs::path dir = scratch_dir("ckpt_inspect");
  ckpt::save_checkpoint(dir, sample(100));
  ckpt::save_checkpoint(dir, sample(200));
  // A directory of checkpoints: the newest valid one.
  const CliResult r = run_cli("ckpt inspect '" + dir.string() + "' --json");
  ASSERT_EQ(r.code, 0) << r.err;
  const auto j = nlohmann::json::parse(r.out);
  EXPECT_THAT(j["path"].get<std::string>(), HasSubstr("step-000000200"));
  EXPECT_TRUE(j["valid"].get<bool>());
  EXPECT_EQ(j["manifest"]["step"], 200);
  EXPECT_EQ(j["counters"]["samples"], 12800);
  ASSERT_EQ(j["model"].size(), 2u);
  EXPECT_EQ(j["model"][1]["name"], "fc.weight");
  EXPECT_EQ(j["model"][1]["dtype"], "F32");
  EXPECT_EQ(j["model"][1]["shape"], nlohmann::json::array({2, 3}));
  EXPECT_EQ(j["model"][0]["dtype"], "BF16");
  EXPECT_EQ(j["model"][1]["digest"].get<std::string>().size(), 16u);
  const CliResult text = run_cli("ckpt inspect '" + (dir / "step-000000100").string() + "'");
  ASSERT_EQ(text.code, 0) << text.err;
  EXPECT_THAT(text.out, HasSubstr("checksums: ok"));
  EXPECT_THAT(text.out, HasSubstr("fc.weight"));
  EXPECT_THAT(text.out, HasSubstr("step 100 epoch 2"));
}

TEST(CkptCli, InspectOfACorruptCheckpointExits3WithTheReason) {
  const fs::path dir = scratch_dir("ckpt_corrupt");
  const fs::path p = ckpt::save_checkpoint(dir, sample(7));
  fs::resize_file(p / "state.bin", fs::file_size(p / "state.bin") - 1);
  const CliResult r = run_cli("ckpt inspect '" + p.string() + "'");
  EXPECT_EQ(r.code, 3);
  EXPECT_THAT(r.out, HasSubstr("NOT USABLE: state.bin has"));
  EXPECT_THAT(r.err, HasSubstr("(truncated?)"));
  const CliResult none = run_cli("ckpt inspect '" + dir.string() + "'");
  EXPECT_EQ(none.code, 3);
  EXPECT_THAT(none.err, HasSubstr("none verifies: step-000000007: state.bin has"));
}

TEST(CkptCli, ExportWritesRawOrEmaWeights) {
  const fs::path dir = scratch_dir("ckpt_export");
  const fs::path p = ckpt::save_checkpoint(dir, sample(3));
  CliResult r = run_cli("ckpt export '" + p.string() + "' --to '" + (dir / "raw.safetensors").string() + "'");
  ASSERT_EQ(r.code, 0) << r.err;
  auto raw = ckpt::read_safetensors(dir / "raw.safetensors");
  EXPECT_TRUE(raw.at("fc.weight").equal(at::arange(6, at::kFloat).reshape({2, 3})));
  EXPECT_EQ(raw.at("fc.bias").scalar_type(), at::kBFloat16);
  r = run_cli("ckpt export '" + p.string() + "' --to '" + (dir / "ema.safetensors").string() + "' --ema");
  ASSERT_EQ(r.code, 0) << r.err;
  auto ema = ckpt::read_safetensors(dir / "ema.safetensors");
  EXPECT_TRUE(ema.at("fc.weight").equal(at::ones({2, 3})));
  EXPECT_TRUE(ema.at("fc.bias").equal(at::zeros({2}, at::kBFloat16)));  // no EMA entry: the raw weight
  EXPECT_EQ(run_cli("ckpt export '" + p.string() + "'").code, 2);      // --to is required
}

// `ckpt export` of the sharded and of the whole checkpoint, raw and then EMA (left in <dir>/sharded.safetensors and
// whole.safetensors): `tensors` tensors each, the same bytes.
void expect_same_exports(const fs::path& sharded, const fs::path& whole, const fs::path& dir, std::size_t tensors) {
  for (const std::string ema : {"", " --ema"}) {
    for (const auto& [from, to] :
         {std::pair{sharded, dir / "sharded.safetensors"}, std::pair{whole, dir / "whole.safetensors"}}) {
      const CliResult e = run_cli("ckpt export '" + from.string() + "' --to '" + to.string() + "'" + ema);
      ASSERT_EQ(e.code, 0) << e.err;
      EXPECT_THAT(e.out, HasSubstr(fmt::format("wrote {} tensors", tensors)));
    }
    EXPECT_EQ(slurp(dir / "sharded.safetensors"), slurp(dir / "whole.safetensors")) << ema;
  }
}

// The same tensors as one process's sharded checkpoint (one shard): inspect names the layout, the shard and the rank;
// export writes the bytes the whole layout's export writes, raw and EMA.
TEST(CkptCli, ShardedCheckpointOfOneProcessInspectsAndExportsAsTheWholeOne) {
  const fs::path dir = scratch_dir("ckpt_sharded_one");
  const fs::path whole = ckpt::save_checkpoint(dir / "whole", sample(5));
  const fs::path sharded = ckpt::save_sharded_checkpoint(dir / "sharded", sample(5), ckpt::ShardWriters{});
  const CliResult r = run_cli("ckpt inspect '" + sharded.string() + "' --json");
  ASSERT_EQ(r.code, 0) << r.err;
  const auto j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["manifest"]["layout"], "sharded");
  EXPECT_EQ(j["manifest"]["world_size"], 1);
  EXPECT_EQ(j["manifest"]["format_version"], 2);
  EXPECT_EQ(j["counters"]["samples"], 320);
  ASSERT_EQ(j["model"].size(), 2u);
  EXPECT_EQ(j["model"][1]["name"], "fc.weight");
  EXPECT_EQ(j["model"][1]["file"], "shard-00000-of-00001.safetensors");
  EXPECT_EQ(j["model"][1]["rank"], 0);
  // The tensors' descriptions and digests are the whole layout's.
  const auto w = nlohmann::json::parse(run_cli("ckpt inspect '" + whole.string() + "' --json").out);
  EXPECT_FALSE(w["manifest"].contains("layout"));  // the whole layout's output as it was
  EXPECT_FALSE(w["model"][0].contains("file"));
  for (const char* section : {"model", "state"}) {
    ASSERT_EQ(j[section].size(), w[section].size()) << section;
    for (std::size_t i = 0; i < w[section].size(); ++i) {
      nlohmann::json t = j[section][i];
      t.erase("file");
      t.erase("rank");
      EXPECT_EQ(t, w[section][i]) << section;
    }
  }
  const CliResult text = run_cli("ckpt inspect '" + sharded.string() + "'");
  ASSERT_EQ(text.code, 0) << text.err;
  EXPECT_THAT(text.out, HasSubstr("layout sharded: 1 rank(s) wrote it, a shard each"));
  EXPECT_THAT(text.out, HasSubstr("  shard-00000-of-00001.safetensors "));
  EXPECT_THAT(text.out, HasSubstr("  in shard-00000-of-00001.safetensors (rank 0)\n"));
  expect_same_exports(sharded, whole, dir, 2);
}

// --- two ranks ---

// 96 rows of 4 features, y their sum.
fs::path ckpt_write_csv(const fs::path& dir) {
  std::string s = "f0,f1,f2,f3,y\n";
  for (int r = 0; r < 96; ++r) {
    double y = 0;
    for (int f = 0; f < 4; ++f) {
      const double v = ((r * 31 + f * 17) % 23) / 23.0 - 0.5;
      y += v;
      s += fmt::format("{},", v);
    }
    s += fmt::format("{}\n", y);
  }
  std::ofstream(dir / "data.csv") << s;
  return dir / "data.csv";
}

// An MLP on the CSV, 2 ranks of batch 8 for 6 steps with EMA, clipping and accumulation in fp32: zero2 and ddp train to
// the same weights bitwise there (DistCli.Zero1AndZero2TrainAsDdp...), zero2 writing sharded checkpoints, ddp whole.
CliResult ckpt_train_two_ranks(const fs::path& dir, const std::string& strategy, int port) {
  return run_cli(fmt::format(
      "launch -n 2 --master-port {} -- train output_dir={} name={} data.source=csv data.path={} "
      "data.csv.targets=[y] data.batch_size=8 data.val_fraction=0.25 model.name=mlp model.in_features=4 "
      "model.hidden=[16] model.out_features=1 train.epochs=100000 train.max_steps=6 train.log_every_n_steps=3 "
      "train.eval_every_n_steps=0 checkpoint.at_end=true threads=1 data.workers=0 precision=fp32 "
      "data.shuffle=true train.accumulation_steps=2 train.clip_max_norm=0.05 ema.enabled=true dist.strategy={}",
      port, dir.string(), strategy, ckpt_write_csv(dir).string(), strategy));
}

// Names, dtypes, shapes, bytes' SHA-256 and metadata of a safetensors file as Python's safetensors reads it.
const char* const kDescribeInPython = R"(import hashlib, json, sys
import torch
from safetensors import safe_open
from safetensors.torch import load_file
tensors = load_file(sys.argv[1])
with safe_open(sys.argv[1], framework="pt") as f:
    metadata = f.metadata()
print(json.dumps({"metadata": metadata, "tensors": {name: {"dtype": str(t.dtype), "shape": list(t.shape),
    "sha256": hashlib.sha256(t.contiguous().reshape(-1).view(torch.uint8).numpy().tobytes()).hexdigest()} for name, t in tensors.items()}}))
)";

// inspect of the two ranks' sharded checkpoint: the layout, the world size, and each tensor's shard and rank (the
// owners of the weights on both ranks; each rank's own RNG state in its own shard); the tensors' digests and the
// counters are those of ddp's whole checkpoint.
void expect_two_ranks_inspected(const fs::path& dir, const fs::path& sharded, const fs::path& whole) {
  const CliResult r = run_cli("ckpt inspect '" + (dir / "zero2").string() + "' --json");
  ASSERT_EQ(r.code, 0) << r.err;
  const auto j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["path"], sharded.string());
  EXPECT_EQ(j["manifest"]["layout"], "sharded");
  EXPECT_EQ(j["manifest"]["world_size"], 2);
  EXPECT_EQ(j["manifest"]["files"].size(), 2u);
  std::set<int> writers;
  for (const auto& t : j["model"]) {
    writers.insert(t["rank"].get<int>());
    EXPECT_EQ(t["file"], ckpt::shard_file_name(t["rank"].get<int>(), 2)) << t.dump();
  }
  EXPECT_EQ(writers, (std::set<int>{0, 1}));
  for (const auto& t : j["state"]) {
    const std::string name = t["name"];
    for (int rank : {0, 1}) {
      if (name.rfind(fmt::format("rank.{}.", rank), 0) == 0) EXPECT_EQ(t["rank"], rank) << name;
    }
  }
  const auto w = nlohmann::json::parse(run_cli("ckpt inspect '" + whole.string() + "' --json").out);
  ASSERT_EQ(j["model"].size(), w["model"].size());
  for (std::size_t i = 0; i < w["model"].size(); ++i)
    EXPECT_EQ(j["model"][i]["digest"], w["model"][i]["digest"]) << w["model"][i].dump();
  EXPECT_EQ(j["counters"], w["counters"]);
  const CliResult text = run_cli("ckpt inspect '" + sharded.string() + "'");
  EXPECT_THAT(text.out, HasSubstr("layout sharded: 2 rank(s) wrote it, a shard each"));
  EXPECT_THAT(text.out, HasSubstr("  in shard-00001-of-00002.safetensors (rank 1)\n"));
}

// Python's safetensors reads the export (<dir>/sharded.safetensors, EMA): the same names, shapes and bytes. Where
// BELLOWS_PYTHON is set.
void expect_python_reads_the_export(const fs::path& dir, const std::map<std::string, at::Tensor>& exported) {
  const char* python = std::getenv("BELLOWS_PYTHON");
  if (python == nullptr || *python == '\0') return;
  std::ofstream(dir / "describe.py") << kDescribeInPython;
  const std::string command = fmt::format("'{}' '{}' '{}' > '{}'", python, (dir / "describe.py").string(),
                                          (dir / "sharded.safetensors").string(), (dir / "described.json").string());
  ASSERT_EQ(std::system(command.c_str()), 0) << command;
  const auto d = nlohmann::json::parse(slurp(dir / "described.json"));
  EXPECT_EQ(d["metadata"], (nlohmann::json{{"format", "pt"}, {"bellows_step", "6"}, {"weights", "ema"}}));
  ASSERT_EQ(d["tensors"].size(), exported.size());
  for (const auto& [name, t] : exported) {
    const auto& p = d["tensors"][name];
    EXPECT_EQ(p["dtype"], "torch.float32") << name;
    EXPECT_EQ(p["shape"].get<std::vector<std::int64_t>>(), t.sizes().vec()) << name;
    EXPECT_EQ(p["sha256"], ckpt::sha256_hex(std::string_view(static_cast<const char*>(t.data_ptr()), t.nbytes())))
        << name;
  }
}

// predict from the sharded checkpoint (run zero2 in `dir`): ddp's predictions, bitwise (EMA by default, and raw).
void expect_two_ranks_predict_as_ddp(const fs::path& dir) {
  data::write_npy(dir / "x.npy", at::sin(at::arange(40, at::kFloat)).reshape({10, 4}));
  for (const std::string weights : {"", " --raw"}) {
    for (const std::string run : {"zero2", "ddp"}) {
      const CliResult p =
          run_cli(fmt::format("predict '{}' --threads 1 --input '{}' --output '{}'{}", (dir / run).string(),
                              (dir / "x.npy").string(), (dir / (run + ".npy")).string(), weights));
      ASSERT_EQ(p.code, 0) << run << weights << "\n" << p.err;
      EXPECT_THAT(p.out, HasSubstr(weights.empty() ? "EMA weights of step-000000006" : "raw weights"));
    }
    const at::Tensor y = data::read_npy(dir / "zero2.npy");
    EXPECT_EQ(y.sizes(), (std::vector<std::int64_t>{10, 1}));
    EXPECT_TRUE(y.equal(data::read_npy(dir / "ddp.npy"))) << weights;
  }
}

TEST(CkptCli, TwoRanksShardedCheckpointInspectsExportsAndPredictsAsTheWholeOneOfTheSameWeights) {
  const fs::path dir = scratch_dir("ckpt_sharded_two");
  const int port = 20000 + static_cast<int>((getpid() + 97) % 20000);
  for (const std::string strategy : {"zero2", "ddp"}) {
    const CliResult r = ckpt_train_two_ranks(dir, strategy, port);
    ASSERT_EQ(r.code, 0) << strategy << "\n" << r.out << r.err;
  }
  const fs::path sharded = dir / "zero2" / "checkpoints" / "step-000000006",
                 whole = dir / "ddp" / "checkpoints" / "step-000000006";
  ASSERT_EQ(ckpt::read_manifest(sharded).layout, "sharded");
  ASSERT_EQ(ckpt::read_manifest(whole).layout, "whole");
  ASSERT_NO_FATAL_FAILURE(expect_two_ranks_inspected(dir, sharded, whole));

  // export: the same file from the shards as from ddp's whole checkpoint, raw and EMA.
  expect_same_exports(sharded, whole, dir, 4);
  const auto exported = ckpt::read_safetensors(dir / "sharded.safetensors");  // EMA
  ASSERT_EQ(exported.size(), 4u);
  EXPECT_TRUE(
      exported.at("layers.0.weight").equal(ckpt::load_checkpoint(whole).state.at("ema.weights.layers.0.weight")));
  ASSERT_NO_FATAL_FAILURE(expect_python_reads_the_export(dir, exported));
  expect_two_ranks_predict_as_ddp(dir);
}

// --- resume=auto past a broken sharded checkpoint ---

// Each way a sharded checkpoint breaks, in a copy of the same run: resume=auto names the broken step 4 and why, and
// continues from step 2. A whole checkpoint (format version 1, the layout of every checkpoint before sharding) still
// loads.
TEST(CkptCli, ResumeAutoPassesOverABrokenShardedCheckpointToTheNewestValidOne) {
  namespace bad = bad_input;
  const fs::path dir = scratch_dir("ckpt_resume_auto");
  bad::train_sharded_demo_checkpoint(dir);
  const std::vector<std::tuple<std::string, std::function<void(const fs::path&)>, std::string>> cases = {
      {"missing", bad::remove_shard, bad::kShard + " is missing"},
      {"checksum", bad::corrupt_shard, bad::kShard + ": checksum mismatch (SHA-256 differs from the manifest)"},
      {"steps", bad::shard_of_another_step,
       bad::kShard + " belongs to step 2, the manifest to step 4 (shards of two checkpoints mixed)"},
      {"newer", bad::manifest_of_a_newer_bellows, "format version 3: written by a newer bellows"},
  };
  const std::string resume =
      std::string(" train.max_steps=6 model.hidden=[8] checkpoint.layout=sharded resume=auto") + bad::kDemoData;
  for (const auto& [name, breakage, problem] : cases) {
    const fs::path out = dir / name;
    fs::copy(dir / "src", out, fs::copy_options::recursive);
    breakage(out / "demo" / "checkpoints" / "step-000000004");
    const CliResult r = run_cli("train --output-dir '" + out.string() + "'" + resume);
    ASSERT_EQ(r.code, 0) << name << "\n" << r.out << r.err;
    EXPECT_THAT(r.out + r.err, HasSubstr("warning: skipped checkpoint step-000000004: " + problem)) << name;
    EXPECT_THAT(r.out,
                HasSubstr("resumed from " + (out / "demo" / "checkpoints" / "step-000000002").string() + " (step 2"))
        << name;
    EXPECT_THAT(r.out, HasSubstr("optimizer steps   6")) << name;
  }
  // Version 1: what the whole layout writes, as bellows wrote every checkpoint before the sharded layout.
  const fs::path whole = dir / "whole";
  bad::train_demo_checkpoint(whole);
  const ckpt::Manifest m = ckpt::read_manifest(whole / "src" / "demo" / "checkpoints" / "step-000000004");
  EXPECT_EQ(m.format_version, 1);
  EXPECT_FALSE(nlohmann::json::parse(slurp(whole / "src" / "demo" / "checkpoints" / "step-000000004" / "manifest.json"))
                   .contains("layout"));
  const CliResult r = run_cli("train --output-dir '" + (whole / "src").string() + "'" + resume);
  ASSERT_EQ(r.code, 0) << r.out << r.err;
  EXPECT_THAT(r.out, HasSubstr("resumed from " + (whole / "src" / "demo" / "checkpoints" / "step-000000004").string() +
                               " (step 4"));
  EXPECT_EQ(ckpt::read_manifest(whole / "src" / "demo" / "checkpoints" / "step-000000006").layout, "sharded");
}

}  // namespace
}  // namespace bellows::testing
