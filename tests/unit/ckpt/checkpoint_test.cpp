// The checkpoint directory format: round trips, atomicity under a killed writer, corruption detection,
// newest-valid selection and pruning.
#include <ATen/ATen.h>
#include <fmt/format.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <thread>

#include "bellows/ckpt/checkpoint.h"
#include "bellows/util/error.h"
#include "test_util.h"

namespace bellows::ckpt {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;
using test_support::error_from;

fs::path fresh_dir(const std::string& tag) {
  const fs::path d = fs::path(::testing::TempDir()) / fmt::format("bellows_ckpt_{}_{}", tag, ::getpid());
  fs::remove_all(d);
  fs::create_directories(d);
  return d;
}

Checkpoint sample(std::int64_t step, std::int64_t size = 64) {
  Checkpoint c;
  c.step = step;
  c.epoch = step / 10;
  c.model["layer.weight"] = at::arange(size, at::kFloat).reshape({size / 8, 8}) + static_cast<double>(step);
  c.model["layer.bias"] = at::full({8}, 0.5, at::kBFloat16);
  c.model["bn.num_batches_tracked"] = at::scalar_tensor(step, at::kLong);
  put_int(c.state, "counters.step", step);
  put_double(c.state, "scaler.scale", 65536.0);
  c.state["optim.exp_avg.0"] = at::ones({3, 3}, at::kDouble) * static_cast<double>(step);
  c.info = {{"metric", 0.25}, {"config", "name: demo\n"}};
  return c;
}

void flip_byte(const fs::path& file, std::uint64_t offset) {
  std::fstream f(file, std::ios::in | std::ios::out | std::ios::binary);
  f.seekg(static_cast<std::streamoff>(offset));
  char b = 0;
  f.read(&b, 1);
  b = static_cast<char>(b ^ 0x5A);
  f.seekp(static_cast<std::streamoff>(offset));
  f.write(&b, 1);
}

TEST(Checkpoint, RoundTripKeepsNamesValuesAndDtypes) {
  const fs::path dir = fresh_dir("roundtrip");
  const Checkpoint saved = sample(1234);
  const fs::path p = save_checkpoint(dir, saved);
  EXPECT_EQ(p.filename(), "step-000001234");
  for (const char* f : {kModelFile, kStateFile, kManifestFile}) EXPECT_TRUE(fs::exists(p / f)) << f;
  const Checkpoint back = load_checkpoint(p);
  EXPECT_EQ(back.step, 1234);
  EXPECT_EQ(back.epoch, 123);
  EXPECT_EQ(back.info["metric"], 0.25);
  ASSERT_EQ(back.model.size(), saved.model.size());
  for (const auto& [name, t] : saved.model) {
    EXPECT_EQ(back.model.at(name).scalar_type(), t.scalar_type()) << name;
    EXPECT_TRUE(back.model.at(name).equal(t)) << name;
  }
  EXPECT_EQ(get_int(back.state, "counters.step"), 1234);
  EXPECT_EQ(get_double(back.state, "scaler.scale"), 65536.0);
  EXPECT_TRUE(back.state.at("optim.exp_avg.0").equal(saved.state.at("optim.exp_avg.0")));
  const Manifest m = read_manifest(p);
  EXPECT_EQ(m.format_version, kFormatVersion);
  EXPECT_FALSE(m.torch_version.empty());
  EXPECT_EQ(m.files.at(kModelFile).second, fs::file_size(p / kModelFile));
}

TEST(Checkpoint, NonContiguousAndViewTensorsAreSavedByValue) {
  const fs::path dir = fresh_dir("views");
  Checkpoint c = sample(1);
  const at::Tensor base = at::arange(12, at::kFloat).reshape({3, 4});
  c.model["t"] = base.t();  // non-contiguous
  const Checkpoint back = load_checkpoint(save_checkpoint(dir, c));
  EXPECT_TRUE(back.model.at("t").equal(base.t()));
}

TEST(Checkpoint, CorruptionIsDetectedAndNamed) {
  const fs::path dir = fresh_dir("corrupt");
  const fs::path p = save_checkpoint(dir, sample(5));
  ASSERT_TRUE(verify_checkpoint(p).ok);

  flip_byte(p / kStateFile, fs::file_size(p / kStateFile) - 3);  // a data byte
  Verification v = verify_checkpoint(p);
  EXPECT_FALSE(v.ok);
  EXPECT_EQ(v.problem, "state.bin: checksum mismatch (SHA-256 differs from the manifest)");
  const Error e = error_from([&] { load_checkpoint(p); });
  EXPECT_EQ(e.kind(), ErrorKind::kData);
  EXPECT_THAT(e.message(), HasSubstr("step-000000005 is not usable: state.bin: checksum mismatch"));

  const fs::path q = save_checkpoint(dir, sample(6));
  fs::resize_file(q / kModelFile, fs::file_size(q / kModelFile) - 10);
  EXPECT_THAT(verify_checkpoint(q).problem, HasSubstr("model.safetensors has"));
  EXPECT_THAT(verify_checkpoint(q).problem, HasSubstr("(truncated?)"));

  const fs::path r = save_checkpoint(dir, sample(7));
  fs::remove(r / kManifestFile);
  EXPECT_THAT(verify_checkpoint(r).problem, HasSubstr("manifest.json is missing"));

  const fs::path s = save_checkpoint(dir, sample(8));
  std::ofstream(s / kManifestFile) << "{\"format\": \"bellows-checkpoint\", \"format_version\": 1";  // cut short
  EXPECT_THAT(verify_checkpoint(s).problem, HasSubstr("malformed manifest"));
}

TEST(Checkpoint, LatestValidSkipsBrokenOnesWithReasons) {
  const fs::path dir = fresh_dir("latest");
  for (std::int64_t step : {100, 200, 300}) save_checkpoint(dir, sample(step));
  flip_byte(dir / "step-000000300" / kModelFile, 20);  // inside the header JSON
  fs::create_directories(dir / "step-000000400");      // a directory that never got its files
  std::vector<std::string> skipped;
  const auto best = find_latest_valid(dir, &skipped);
  ASSERT_TRUE(best.has_value());
  EXPECT_EQ(best->filename(), "step-000000200");
  ASSERT_EQ(skipped.size(), 2u);
  EXPECT_THAT(skipped[0], HasSubstr("step-000000400: "));
  EXPECT_THAT(skipped[0], HasSubstr("manifest.json is missing"));
  EXPECT_EQ(skipped[1], "step-000000300: model.safetensors: checksum mismatch (SHA-256 differs from the manifest)");
  EXPECT_FALSE(find_latest_valid(fresh_dir("empty")).has_value());
}

TEST(Checkpoint, PruneKeepsTheNewestAndTheProtectedOnes) {
  const fs::path dir = fresh_dir("prune");
  for (std::int64_t step = 1; step <= 6; ++step) save_checkpoint(dir, sample(step * 10));
  fs::create_directories(dir / ".tmp-step-000000070-999999-0");  // a dead writer's leftovers
  const auto removed = prune_checkpoints(dir, 2, {dir / "step-000000020"});
  std::vector<std::string> left;
  for (const auto& p : list_checkpoints(dir)) left.push_back(p.filename().string());
  EXPECT_EQ(left, (std::vector<std::string>{"step-000000020", "step-000000050", "step-000000060"}));
  EXPECT_FALSE(fs::exists(dir / ".tmp-step-000000070-999999-0"));
  EXPECT_EQ(removed.size(), 4u);
}

TEST(Checkpoint, SavingTheSameStepAgainReplacesIt) {
  const fs::path dir = fresh_dir("replace");
  save_checkpoint(dir, sample(3));
  Checkpoint again = sample(3);
  again.info["metric"] = 0.5;
  save_checkpoint(dir, again);
  EXPECT_EQ(list_checkpoints(dir).size(), 1u);
  EXPECT_EQ(load_checkpoint(dir / "step-000000003").info["metric"], 0.5);
}

// A writer killed at arbitrary moments (SIGKILL, like kill -9 or a node failure) never leaves a checkpoint
// that verifies but is broken: the newest valid one always loads completely. The kill comes once the child has
// completed 1-3 checkpoints of this round (it says so through a pipe), so it lands in the middle of the next
// write, and every round is known to have written: no timing decides what the test sees.
TEST(Checkpoint, KilledWriterNeverLeavesABrokenCheckpoint) {
  const fs::path dir = fresh_dir("killed");
  // Tensors are made before fork(): the child only sets a scalar and writes (no ATen thread pools there).
  Checkpoint base = sample(0, 1 << 18);  // a 1 MiB weight, so that kills land mid-write
  save_checkpoint(dir, base);
  for (int round = 0; round < 12; ++round) {
    int done[2];
    ASSERT_EQ(::pipe(done), 0);
    const pid_t child = ::fork();
    ASSERT_GE(child, 0);
    if (child == 0) {
      ::close(done[0]);
      for (std::int64_t step = 1;; ++step) {
        base.step = round * 100000 + step;
        base.model["marker"] = at::scalar_tensor(base.step, at::kLong);
        save_checkpoint(dir, base);
        const char one = 1;
        if (::write(done[1], &one, 1) != 1) ::_exit(1);
      }
    }
    ::close(done[1]);
    const int completed = 1 + round % 3;
    for (int n = 0; n < completed; ++n) {
      char one = 0;
      ASSERT_EQ(::read(done[0], &one, 1), 1) << "the writer died before its checkpoint " << n + 1 << " of round " << round;
    }
    ::kill(child, SIGKILL);
    ::close(done[0]);
    int status = 0;
    ::waitpid(child, &status, 0);
    ASSERT_TRUE(WIFSIGNALED(status));
    std::vector<std::string> skipped;
    const auto latest = find_latest_valid(dir, &skipped);
    ASSERT_TRUE(latest.has_value()) << "round " << round;
    const Checkpoint c = load_checkpoint(*latest);
    EXPECT_TRUE(c.model.at("layer.weight").equal(base.model.at("layer.weight"))) << *latest;
    EXPECT_EQ(c.model.at("marker").item<std::int64_t>(), c.step) << *latest;
    // At least the checkpoints the child reported are there (a kill mid-write may have completed one more).
    EXPECT_GE(c.step, round * 100000 + completed) << "round " << round;
    prune_checkpoints(dir, 3);
  }
}

}  // namespace
}  // namespace bellows::ckpt
