// `bellows ckpt inspect` and `bellows ckpt export` on checkpoints written through the library.
#include <ATen/ATen.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "bellows/ckpt/checkpoint.h"
#include "bellows/ckpt/safetensors.h"
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

}  // namespace
}  // namespace bellows::testing
