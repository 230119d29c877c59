// The C API (bellows_c.h) as a C program sees it: status codes and messages for every bad call, the host program
// going on after each; training sessions, synchronous and in the background; pushes from another thread while a
// session trains; predictions; checkpoints that `bellows ckpt inspect` reads and `bellows train --resume`
// continues. Linked against libbellows_c (and libbellows only for writing test data).
#include "bellows/bellows_c.h"

#include <gtest/gtest.h>

#include <ATen/ATen.h>

#include <atomic>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "bellows/data/npy.h"
#include "bellows/version.h"
#include "run_cli.h"
#include "test_paths.h"

namespace {

using bellows::testing::run_cli;
using bellows::testing::scratch_dir;

// A small conditional DDPM (3 context values -> 8 values) trained online.
std::string config_text(const std::filesystem::path& out) {
  return "name: capi\n"
         "seed: 0\n"
         "output_dir: " + out.string() + "\n"
         "online: {console: none}\n"
         "data:\n"
         "  source: stream\n"
         "  stream: {capacity: 4096, ready_samples: 64}\n"
         "  batch_size: 32\n"
         "  val_fraction: 0\n"
         "model: {name: ddpm, context_features: 3, out_features: 8, hidden: 16, steps: 10}\n"
         "train: {epochs: 2}\n"
         "schedule: {type: constant}\n"
         "ema: {enabled: true, decay: 0.9}\n";
}

bellows_tensor tensor(const char* name, void* data, std::vector<int64_t> shape, int32_t dtype = BELLOWS_FLOAT32) {
  bellows_tensor t{};
  t.name = name;
  t.data = data;
  t.dtype = dtype;
  t.ndim = static_cast<int32_t>(shape.size());
  for (std::size_t d = 0; d < shape.size(); ++d) t.shape[d] = shape[d];
  return t;
}

// n samples: x [n, 3] and y [n, 8] = x repeated and cut.
struct Block {
  std::vector<float> x, y;
  explicit Block(int n, float offset = 0) : x(static_cast<std::size_t>(n) * 3), y(static_cast<std::size_t>(n) * 8) {
    for (int i = 0; i < n; ++i) {
      for (int j = 0; j < 3; ++j) x[static_cast<std::size_t>(i * 3 + j)] = std::sin(offset + 0.1f * static_cast<float>(i * 3 + j));
      for (int k = 0; k < 8; ++k) y[static_cast<std::size_t>(i * 8 + k)] = x[static_cast<std::size_t>(i * 3 + k % 3)];
    }
  }
  int push(bellows_trainer* t) {
    const int64_t n = static_cast<int64_t>(x.size() / 3);
    bellows_tensor ts[2] = {tensor("x", x.data(), {n, 3}), tensor("y", y.data(), {n, 8})};
    return bellows_push_block(t, ts, 2);
  }
};

class CApi : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = scratch_dir("capi");
    const std::string yaml = config_text(dir_ / "runs");
    ASSERT_EQ(bellows_create_from_string(yaml.c_str(), nullptr, 0, &t_), BELLOWS_OK) << bellows_last_error();
  }
  void TearDown() override { EXPECT_EQ(bellows_destroy(t_), BELLOWS_OK) << bellows_last_error(); }
  std::string error() const { return bellows_last_error(); }

  std::filesystem::path dir_;
  bellows_trainer* t_ = nullptr;
};

TEST(CApiVersion, MatchesTheLibrary) {
  EXPECT_STREQ(bellows_version(), BELLOWS_VERSION);
  EXPECT_EQ(bellows_api_version(), BELLOWS_C_API_VERSION);
  EXPECT_STREQ(bellows_last_error(), "");
}

TEST(CApiCreate, BadConfigsAreStatusesWithMessages) {
  const auto dir = scratch_dir("capi_create");
  bellows_trainer* t = reinterpret_cast<bellows_trainer*>(0x1);
  EXPECT_EQ(bellows_create_from_string("data: [unclosed\n", nullptr, 0, &t), BELLOWS_ERR_CONFIG);
  EXPECT_EQ(t, nullptr);
  EXPECT_NE(std::string(bellows_last_error()).find("<config text>:"), std::string::npos) << bellows_last_error();

  EXPECT_EQ(bellows_create((dir / "missing.yaml").c_str(), nullptr, 0, &t), BELLOWS_ERR_CONFIG);
  EXPECT_NE(std::string(bellows_last_error()).find("missing.yaml"), std::string::npos) << bellows_last_error();

  const std::string yaml = config_text(dir / "runs");
  const char* unknown[] = {"model.hiden=8"};
  EXPECT_EQ(bellows_create_from_string(yaml.c_str(), unknown, 1, &t), BELLOWS_ERR_CONFIG);
  EXPECT_NE(std::string(bellows_last_error()).find("model.hiden"), std::string::npos) << bellows_last_error();

  const char* csv[] = {"data.source=csv"};
  EXPECT_EQ(bellows_create_from_string(yaml.c_str(), csv, 1, &t), BELLOWS_ERR_CONFIG);
  EXPECT_NE(std::string(bellows_last_error()).find("data.source: stream"), std::string::npos) << bellows_last_error();

  EXPECT_EQ(bellows_create_from_string(yaml.c_str(), nullptr, 2, &t), BELLOWS_ERR_USAGE);
  EXPECT_EQ(bellows_create_from_string(yaml.c_str(), nullptr, 0, nullptr), BELLOWS_ERR_USAGE);
  EXPECT_EQ(bellows_create(nullptr, nullptr, 0, &t), BELLOWS_ERR_USAGE);

  // A file config with an override works, and the messages of this thread are cleared by a good call.
  std::ofstream(dir / "online.yaml") << yaml;
  const char* overrides[] = {"train.epochs=1"};
  ASSERT_EQ(bellows_create((dir / "online.yaml").c_str(), overrides, 1, &t), BELLOWS_OK) << bellows_last_error();
  EXPECT_STREQ(bellows_last_error(), "");
  EXPECT_EQ(bellows_destroy(t), BELLOWS_OK);
  EXPECT_EQ(bellows_destroy(nullptr), BELLOWS_OK);
}

TEST_F(CApi, BadPushesAreRefusedAndNothingIsStored) {
  std::vector<float> x(6 * 4), y(6 * 8);
  bellows_tensor wide[2] = {tensor("x", x.data(), {6, 4}), tensor("y", y.data(), {6, 8})};
  EXPECT_EQ(bellows_push_block(t_, wide, 2), BELLOWS_ERR_CONFIG);
  EXPECT_NE(error().find("model.context_features is 3"), std::string::npos) << error();
  std::vector<int32_t> ints(6 * 3);
  bellows_tensor integer[2] = {tensor("x", ints.data(), {6, 3}, BELLOWS_INT32), tensor("y", y.data(), {6, 8})};
  EXPECT_EQ(bellows_push_block(t_, integer, 2), BELLOWS_ERR_DATA);
  EXPECT_NE(error().find("expected floating point"), std::string::npos) << error();
  bellows_tensor bad_dtype[2] = {tensor("x", x.data(), {6, 3}, 9), tensor("y", y.data(), {6, 8})};
  EXPECT_EQ(bellows_push_block(t_, bad_dtype, 2), BELLOWS_ERR_USAGE);
  EXPECT_NE(error().find("dtype 9"), std::string::npos) << error();
  bellows_tensor no_name[2] = {tensor(nullptr, x.data(), {6, 3}), tensor("y", y.data(), {6, 8})};
  EXPECT_EQ(bellows_push_block(t_, no_name, 2), BELLOWS_ERR_USAGE);
  bellows_tensor null_data[2] = {tensor("x", nullptr, {6, 3}), tensor("y", y.data(), {6, 8})};
  EXPECT_EQ(bellows_push_block(t_, null_data, 2), BELLOWS_ERR_USAGE);
  EXPECT_NE(error().find("data is NULL"), std::string::npos) << error();
  bellows_tensor too_many_dims = tensor("x", x.data(), {1, 1, 1, 1, 1, 1, 1, 1});
  too_many_dims.ndim = 9;
  EXPECT_EQ(bellows_push(t_, &too_many_dims, 1), BELLOWS_ERR_USAGE);
  EXPECT_EQ(bellows_push(t_, nullptr, 0), BELLOWS_ERR_USAGE);
  // A shape whose element count or byte size overflows 64 bits is the caller's error, said before LibTorch sees it.
  bellows_tensor huge[2] = {tensor("x", x.data(), {int64_t{1} << 40, int64_t{1} << 40}), tensor("y", y.data(), {6, 8})};
  EXPECT_EQ(bellows_push_block(t_, huge, 2), BELLOWS_ERR_USAGE);
  EXPECT_NE(error().find("element count overflows 64 bits"), std::string::npos) << error();
  bellows_tensor huge_bytes[2] = {tensor("x", x.data(), {int64_t{1} << 31, int64_t{1} << 31}), tensor("y", y.data(), {6, 8})};
  EXPECT_EQ(bellows_push_block(t_, huge_bytes, 2), BELLOWS_ERR_USAGE);
  EXPECT_NE(error().find("size in bytes overflows 64 bits"), std::string::npos) << error();
  int64_t n = -1;
  ASSERT_EQ(bellows_buffered(t_, &n), BELLOWS_OK);
  EXPECT_EQ(n, 0);

  // One good sample fixes the layout; a later one of another shape is refused.
  float one_x[3] = {0.1f, 0.2f, 0.3f}, one_y[8] = {};
  bellows_tensor sample[2] = {tensor("x", one_x, {3}), tensor("y", one_y, {8})};
  ASSERT_EQ(bellows_push(t_, sample, 2), BELLOWS_OK) << error();
  bellows_tensor short_y[2] = {tensor("x", one_x, {3}), tensor("y", one_y, {7})};
  EXPECT_EQ(bellows_push(t_, short_y, 2), BELLOWS_ERR_DATA);
  EXPECT_NE(error().find("'y'"), std::string::npos) << error();
  ASSERT_EQ(bellows_buffered(t_, &n), BELLOWS_OK);
  EXPECT_EQ(n, 1);
}

TEST(CApiHandles, CallsOnADestroyedHandleAreRefused) {
  const auto dir = scratch_dir("capi_dead");
  const std::string yaml = config_text(dir / "runs");
  bellows_trainer* t = nullptr;
  ASSERT_EQ(bellows_create_from_string(yaml.c_str(), nullptr, 0, &t), BELLOWS_OK) << bellows_last_error();
  ASSERT_EQ(bellows_destroy(t), BELLOWS_OK);
  Block block(4);
  EXPECT_EQ(block.push(t), BELLOWS_ERR_USAGE);
  EXPECT_NE(std::string(bellows_last_error()).find("not a live bellows trainer"), std::string::npos) << bellows_last_error();
  EXPECT_EQ(bellows_train(t, 0), BELLOWS_ERR_USAGE);
  EXPECT_EQ(bellows_destroy(t), BELLOWS_ERR_USAGE);
  EXPECT_EQ(block.push(nullptr), BELLOWS_ERR_USAGE);
  EXPECT_NE(std::string(bellows_last_error()).find("NULL"), std::string::npos) << bellows_last_error();
}

TEST_F(CApi, PredictBeforeTrainingAndBadOutputsAreRefused) {
  float context[2 * 3] = {0.1f, 0.2f, 0.3f, 0.4f, 0.5f, 0.6f}, out[2 * 8] = {};
  bellows_tensor input = tensor(nullptr, context, {2, 3}), output = tensor(nullptr, out, {});
  EXPECT_EQ(bellows_predict(t_, &input, &output, 16, nullptr), BELLOWS_ERR_USAGE);
  EXPECT_NE(error().find("untrained"), std::string::npos) << error();
  char path[4096];
  EXPECT_EQ(bellows_save(t_, path, sizeof path), BELLOWS_ERR_USAGE);

  Block block(64);
  ASSERT_EQ(block.push(t_), BELLOWS_OK) << error();
  ASSERT_EQ(bellows_train(t_, 0), BELLOWS_OK) << error();
  EXPECT_EQ(bellows_predict(t_, &input, &output, 15, nullptr), BELLOWS_ERR_USAGE);
  EXPECT_NE(error().find("16 values"), std::string::npos) << error();
  bellows_tensor wrong_width = tensor(nullptr, context, {3, 2});
  EXPECT_EQ(bellows_predict(t_, &wrong_width, &output, 16, nullptr), BELLOWS_ERR_DATA);
  EXPECT_NE(error().find("model.context_features"), std::string::npos) << error();
  ASSERT_EQ(bellows_predict(t_, &input, &output, 16, nullptr), BELLOWS_OK) << error();
  EXPECT_EQ(output.ndim, 2);
  EXPECT_EQ(output.shape[0], 2);
  EXPECT_EQ(output.shape[1], 8);
  for (float v : out) EXPECT_TRUE(std::isfinite(v));

  // Several draws per row, in float64, with the trained (not EMA) weights.
  std::vector<double> draws(2 * 3 * 8);
  bellows_tensor output64 = tensor(nullptr, draws.data(), {}, BELLOWS_FLOAT64);
  bellows_predict_options o;
  bellows_predict_options_init(&o);
  o.samples = 3;
  o.ema = 0;
  ASSERT_EQ(bellows_predict(t_, &input, &output64, static_cast<int64_t>(draws.size()), &o), BELLOWS_OK) << error();
  EXPECT_EQ(output64.ndim, 3);
  EXPECT_EQ(output64.shape[1], 3);
}

TEST_F(CApi, SessionsRunInTheBackgroundWhileTheProgramPushes) {
  EXPECT_EQ(bellows_train(t_, 0), BELLOWS_NOT_READY);  // ready_samples: 64
  EXPECT_NE(error().find("holds 0 samples, the session needs 64"), std::string::npos) << error();
  EXPECT_EQ(bellows_wait(t_), BELLOWS_OK);              // none started: nothing to wait for
  EXPECT_EQ(bellows_poll(t_), BELLOWS_OK);

  const char* longer[] = {"train.epochs=200"};
  bellows_trainer* slow = nullptr;
  const std::string yaml = config_text(dir_ / "slow");
  ASSERT_EQ(bellows_create_from_string(yaml.c_str(), longer, 1, &slow), BELLOWS_OK) << error();
  Block block(64);
  ASSERT_EQ(block.push(slow), BELLOWS_OK) << error();
  ASSERT_EQ(bellows_train_async(slow, 0), BELLOWS_OK) << error();
  // While it trains: pushes, counts and metrics from this and another thread; calls that need the model are BUSY.
  std::atomic<int> pushed_ok{0};
  std::thread simulation([&] {
    for (int i = 0; i < 20; ++i) {
      Block b(16, static_cast<float>(i));
      if (b.push(slow) == BELLOWS_OK) ++pushed_ok;
    }
  });
  float context[3] = {}, out[8];
  bellows_tensor input = tensor(nullptr, context, {1, 3}), output = tensor(nullptr, out, {});
  EXPECT_EQ(bellows_predict(slow, &input, &output, 8, nullptr), BELLOWS_ERR_BUSY);
  EXPECT_NE(error().find("running"), std::string::npos) << error();
  EXPECT_EQ(bellows_train(slow, 1), BELLOWS_ERR_BUSY);
  char path[4096];
  EXPECT_EQ(bellows_save(slow, path, sizeof path), BELLOWS_ERR_BUSY);
  bellows_metrics m{};
  ASSERT_EQ(bellows_metrics_get(slow, &m), BELLOWS_OK);
  EXPECT_EQ(m.taken, 64);
  simulation.join();
  EXPECT_EQ(pushed_ok.load(), 20);
  int status = BELLOWS_RUNNING;
  while ((status = bellows_poll(slow)) == BELLOWS_RUNNING) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  EXPECT_EQ(status, BELLOWS_OK);
  ASSERT_EQ(bellows_wait(slow), BELLOWS_OK) << error();
  ASSERT_EQ(bellows_metrics_get(slow, &m), BELLOWS_OK);
  EXPECT_EQ(m.sessions, 1);
  EXPECT_EQ(m.step, 400);  // 200 epochs x 2 batches
  EXPECT_EQ(m.pushed, 64 + 20 * 16);
  EXPECT_EQ(m.buffered, 20 * 16);  // the pushes during the session wait for the next one
  EXPECT_EQ(m.training, 0);
  EXPECT_TRUE(std::isfinite(m.loss));
  EXPECT_GT(m.samples_per_second, 0);
  EXPECT_EQ(bellows_predict(slow, &input, &output, 8, nullptr), BELLOWS_OK) << error();
  // A destroy while a session runs stops it at its next step.
  ASSERT_EQ(bellows_train_async(slow, 0), BELLOWS_OK) << error();
  EXPECT_EQ(bellows_destroy(slow), BELLOWS_OK) << error();
}

// Sessions run on bellows' compute thread; the FLOP counter's profiler (log.flops, on by default) printed "ERROR:
// External init callback must run in same thread as registerClient" there on first use (obs/profile.h). Nothing
// that is not an error may say ERROR on the program's stderr.
TEST(CApiQuiet, ASessionPrintsNoErrorLineOnStderr) {
  const std::filesystem::path dir = scratch_dir("capi_quiet");
  const std::string yaml = config_text(dir / "runs");
  ::testing::internal::CaptureStderr();
  bellows_trainer* t = nullptr;
  const int created = bellows_create_from_string(yaml.c_str(), nullptr, 0, &t);
  int trained = -1;
  if (created == BELLOWS_OK) {
    Block block(64);
    if (block.push(t) == BELLOWS_OK && bellows_train_async(t, 0) == BELLOWS_OK) trained = bellows_wait(t);
  }
  const std::string err = ::testing::internal::GetCapturedStderr();
  ASSERT_EQ(created, BELLOWS_OK) << bellows_last_error();
  EXPECT_EQ(trained, BELLOWS_OK) << bellows_last_error();
  bellows_metrics m{};
  ASSERT_EQ(bellows_metrics_get(t, &m), BELLOWS_OK);
  EXPECT_EQ(m.step, 4);  // 2 epochs x 2 batches
  EXPECT_EQ(bellows_destroy(t), BELLOWS_OK);
  EXPECT_EQ(err.find("ERROR"), std::string::npos) << err;
}

TEST_F(CApi, CheckpointsAreReadByTheCliAndContinuedByBellowsTrain) {
  Block block(64);
  ASSERT_EQ(block.push(t_), BELLOWS_OK) << error();
  ASSERT_EQ(bellows_train(t_, 0), BELLOWS_OK) << error();
  char path[4096];
  ASSERT_EQ(bellows_save(t_, path, sizeof path), BELLOWS_OK) << error();
  EXPECT_EQ(std::filesystem::path(path).filename().string(), "step-000000004");
  char tiny[8];
  EXPECT_EQ(bellows_run_dir(t_, tiny, sizeof tiny), BELLOWS_ERR_USAGE);
  EXPECT_NE(error().find("path_capacity is 8"), std::string::npos) << error();

  const auto inspect = run_cli(std::string("ckpt inspect '") + path + "'");
  EXPECT_EQ(inspect.code, 0) << inspect.err;
  EXPECT_NE(inspect.out.find("step"), std::string::npos) << inspect.out;

  // `bellows train` continues it from step 4 over a file with the same kind of samples.
  const auto data = dir_ / "data";
  std::filesystem::create_directories(data);
  at::manual_seed(0);
  const at::Tensor x = at::randn({64, 3});
  bellows::data::write_npy(data / "x.npy", x);
  bellows::data::write_npy(data / "y.npy", at::cat({x, x, x.narrow(1, 0, 2)}, 1));
  std::ofstream(dir_ / "offline.yaml") << config_text(dir_ / "offline_runs");
  const auto resumed = run_cli("train '" + (dir_ / "offline.yaml").string() + "' data.source=npy data.path='" + (data / "x.npy").string() +
                               "' data.npy.y='" + (data / "y.npy").string() + "' train.epochs=1 resume='" + path + "'");
  ASSERT_EQ(resumed.code, 0) << resumed.out << resumed.err;
  EXPECT_NE(resumed.out.find("comes from online training"), std::string::npos) << resumed.out;
  EXPECT_NE(resumed.out.find("checkpoints/step-000000006 (end"), std::string::npos) << resumed.out;  // 4 + one epoch of 2

  // A corrupt checkpoint: BELLOWS_ERR_DATA naming the file; the trainer goes on as it was.
  const auto bad = dir_ / "bad";
  std::filesystem::copy(path, bad, std::filesystem::copy_options::recursive);
  {
    std::fstream f(bad / "state.bin", std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(20);
    f.write("corrupt", 7);
  }
  EXPECT_EQ(bellows_restore(t_, bad.c_str()), BELLOWS_ERR_DATA);
  EXPECT_NE(error().find("state.bin"), std::string::npos) << error();
  EXPECT_EQ(bellows_restore(t_, (dir_ / "nowhere").c_str()), BELLOWS_ERR_DATA);
  ASSERT_EQ(block.push(t_), BELLOWS_OK) << error();
  ASSERT_EQ(bellows_train(t_, 0), BELLOWS_OK) << error();
  bellows_metrics m{};
  ASSERT_EQ(bellows_metrics_get(t_, &m), BELLOWS_OK);
  EXPECT_EQ(m.step, 8);
}

// What a coupled program met (issue 46), each pinned here.

// A restart after a run directory was suffixed (<name>-2) continues the newest run of the name; a restart that finds
// nothing says so in its status (BELLOWS_STARTED_FRESH), the trainer created untrained; the session count goes on.
TEST(CApiRestart, ResumeAutoContinuesTheNewestRunOfTheNameAndAFreshStartSaysSo) {
  const auto dir = scratch_dir("capi_restart");
  const std::string yaml = config_text(dir / "runs");
  const char* resume[] = {"resume=auto"};
  bellows_trainer* t = nullptr;
  // Nothing to resume yet: created, untrained, and the status says so.
  ASSERT_EQ(bellows_create_from_string(yaml.c_str(), resume, 1, &t), BELLOWS_STARTED_FRESH) << bellows_last_error();
  ASSERT_NE(t, nullptr);
  EXPECT_NE(std::string(bellows_last_error()).find("found no checkpoint"), std::string::npos) << bellows_last_error();
  bellows_metrics m{};
  ASSERT_EQ(bellows_metrics_get(t, &m), BELLOWS_OK);
  EXPECT_EQ(m.restored, 0);
  ASSERT_EQ(bellows_destroy(t), BELLOWS_OK);
  // Two runs without resume: runs/capi-2 and runs/capi-3 (runs/capi holds the untrained one's records), each trained
  // and saved.
  std::vector<std::string> dirs;
  for (int run = 0; run < 2; ++run) {
    ASSERT_EQ(bellows_create_from_string(yaml.c_str(), nullptr, 0, &t), BELLOWS_OK) << bellows_last_error();
    Block block(64, static_cast<float>(run));
    ASSERT_EQ(block.push(t), BELLOWS_OK) << bellows_last_error();
    for (int session = 0; session <= run; ++session) {  // the second run trains two sessions
      if (session > 0) ASSERT_EQ(block.push(t), BELLOWS_OK) << bellows_last_error();
      ASSERT_EQ(bellows_train(t, 0), BELLOWS_OK) << bellows_last_error();
    }
    ASSERT_EQ(bellows_save(t, nullptr, 0), BELLOWS_OK) << bellows_last_error();
    char path[4096];
    ASSERT_EQ(bellows_run_dir(t, path, sizeof path), BELLOWS_OK);
    dirs.emplace_back(path);
    ASSERT_EQ(bellows_destroy(t), BELLOWS_OK);
  }
  EXPECT_EQ(std::filesystem::path(dirs[0]).filename(), "capi-2");
  EXPECT_EQ(std::filesystem::path(dirs[1]).filename(), "capi-3");
  // The restart: the newest run (capi-3, 2 sessions, step 8), not runs/capi or the older capi-2.
  ASSERT_EQ(bellows_create_from_string(yaml.c_str(), resume, 1, &t), BELLOWS_OK) << bellows_last_error();
  char path[4096];
  ASSERT_EQ(bellows_run_dir(t, path, sizeof path), BELLOWS_OK);
  EXPECT_EQ(std::string(path), dirs[1]);
  ASSERT_EQ(bellows_metrics_get(t, &m), BELLOWS_OK);
  EXPECT_EQ(m.restored, 1);
  EXPECT_EQ(m.step, 8);
  EXPECT_EQ(m.sessions, 2);
  Block block(64, 5);
  ASSERT_EQ(block.push(t), BELLOWS_OK) << bellows_last_error();
  ASSERT_EQ(bellows_train(t, 0), BELLOWS_OK) << bellows_last_error();
  ASSERT_EQ(bellows_metrics_get(t, &m), BELLOWS_OK);
  EXPECT_EQ(m.sessions, 3);
  EXPECT_EQ(m.step, 12);
  ASSERT_EQ(bellows_destroy(t), BELLOWS_OK);
}

// data.stream.check_finite: a block with a NaN and an Inf stores its finite samples, refuses the others with a data error
// naming the tensor and the sample, and counts them.
TEST_F(CApi, PushesRefuseSamplesWithNanOrInfAndNameThem) {
  Block block(8);
  block.x[3 * 3 + 1] = std::nanf("");
  block.y[5 * 8 + 7] = INFINITY;
  EXPECT_EQ(block.push(t_), BELLOWS_ERR_DATA);
  EXPECT_NE(error().find("pushed tensor 'x' has NaN at sample 3 of the block (value 1 of the sample): 2 of 8 samples refused, 6 stored"),
            std::string::npos) << error();
  EXPECT_NE(error().find("data.stream.check_finite"), std::string::npos) << error();
  int64_t n = 0;
  ASSERT_EQ(bellows_buffered(t_, &n), BELLOWS_OK);
  EXPECT_EQ(n, 6);
  bellows_metrics m{};
  ASSERT_EQ(bellows_metrics_get(t_, &m), BELLOWS_OK);
  EXPECT_EQ(m.rejected, 2);
  EXPECT_EQ(m.pushed, 6);
  // One sample, all of it refused: nothing stored.
  float x[3] = {1, INFINITY, 2};
  float y[8] = {};
  bellows_tensor one[2] = {tensor("x", x, {3}), tensor("y", y, {8})};
  EXPECT_EQ(bellows_push(t_, one, 2), BELLOWS_ERR_DATA);
  EXPECT_NE(error().find("'x' has +Inf at sample 0"), std::string::npos) << error();
  ASSERT_EQ(bellows_buffered(t_, &n), BELLOWS_OK);
  EXPECT_EQ(n, 6);
}

// A block pushed with its dimensions swapped (a Fortran array with the sample index first) is named as transposed.
TEST_F(CApi, ATransposedFirstBlockIsNamedAsSuch) {
  Block block(16);
  std::vector<float> xt(block.x.size()), yt(block.y.size());
  for (int i = 0; i < 16; ++i) {
    for (int j = 0; j < 3; ++j) xt[static_cast<std::size_t>(j * 16 + i)] = block.x[static_cast<std::size_t>(i * 3 + j)];
    for (int k = 0; k < 8; ++k) yt[static_cast<std::size_t>(k * 16 + i)] = block.y[static_cast<std::size_t>(i * 8 + k)];
  }
  bellows_tensor ts[2] = {tensor("x", xt.data(), {3, 16}), tensor("y", yt.data(), {8, 16})};
  EXPECT_EQ(bellows_push_block(t_, ts, 2), BELLOWS_ERR_DATA);
  EXPECT_NE(error().find("the first pushed block looks transposed: 'x' [3, 16] (3 samples of 16 values), 'y' [8, 16]"), std::string::npos)
      << error();
  EXPECT_NE(error().find("last in Fortran"), std::string::npos) << error();
  int64_t n = -1;
  ASSERT_EQ(bellows_buffered(t_, &n), BELLOWS_OK);
  EXPECT_EQ(n, 0);
  ASSERT_EQ(block.push(t_), BELLOWS_OK) << error();  // the right way round
}

// The console of online training: one line a session (online.log: sessions), no epoch or evaluation lines; the metrics
// carry the last evaluation's loss; a process that mpirun started as one of several is told it trains alone.
TEST(CApiLog, SessionsLogOneLineEachAndTheMetricsCarryTheEvaluation) {
  const auto dir = scratch_dir("capi_log");
  std::string yaml = config_text(dir / "runs");
  const char* overrides[] = {"online.console=stderr", "data.val_fraction=0.25"};
  setenv("OMPI_COMM_WORLD_SIZE", "2", 1);
  setenv("OMPI_COMM_WORLD_RANK", "1", 1);
  setenv("OMPI_COMM_WORLD_LOCAL_RANK", "1", 1);
  setenv("OMPI_COMM_WORLD_LOCAL_SIZE", "2", 1);
  ::testing::internal::CaptureStderr();
  bellows_trainer* t = nullptr;
  const int created = bellows_create_from_string(yaml.c_str(), overrides, 2, &t);
  for (const char* v : {"OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_SIZE"}) unsetenv(v);
  int trained = -1;
  if (created == BELLOWS_OK) {
    Block block(64);
    for (int session = 0; session < 3 && (block.push(t) == BELLOWS_OK); ++session) trained = bellows_train(t, 0);
  }
  const std::string err = ::testing::internal::GetCapturedStderr();
  ASSERT_EQ(created, BELLOWS_OK) << bellows_last_error();
  EXPECT_EQ(trained, BELLOWS_OK) << bellows_last_error();
  bellows_metrics m{};
  ASSERT_EQ(bellows_metrics_get(t, &m), BELLOWS_OK);
  EXPECT_EQ(m.sessions, 3);
  EXPECT_TRUE(std::isfinite(m.eval_loss)) << m.eval_loss;
  EXPECT_TRUE(std::isnan(m.eval_metric));  // the ddpm reports its loss only
  EXPECT_EQ(m.rank, 0);
  EXPECT_EQ(m.ranks, 1);
  EXPECT_EQ(bellows_destroy(t), BELLOWS_OK);
  int sessions = 0, epochs = 0;
  std::istringstream lines(err);
  for (std::string line; std::getline(lines, line);) {
    if (line.starts_with("online session ")) ++sessions;
    if (line.starts_with("epoch ") || line.starts_with("eval")) ++epochs;
  }
  EXPECT_EQ(sessions, 3) << err;
  EXPECT_EQ(epochs, 0) << err;
  EXPECT_NE(err.find("this process is rank 1 of 2 started by"), std::string::npos) << err;
  EXPECT_NE(err.find("bellows_create_mpi"), std::string::npos) << err;
}

// A user's TorchScript model (model.name: torchscript) through the same calls: the diffusion model of
// examples/icon-coupled/scripted_ddpm.py, small, trained online from pushed blocks, sampled by its own `sample`
// method (three draws per row), its checkpoint in the Python state_dict's names.
TEST(CApiScripted, AUsersModelTrainsOnlineAndPredictsThroughItsSampler) {
  const auto dir = scratch_dir("capi_scripted");
  const char* python = std::getenv("BELLOWS_PYTHON");
  const std::string make = std::string("'") + (python ? python : "python3") + "' '" + BELLOWS_SOURCE_DIR +
                           "/examples/icon-coupled/scripted_ddpm.py' '" + (dir / "ddpm.pt").string() +
                           "' --context 3 --fine 8 --hidden 16 --steps 10 >'" + (dir / "log").string() + "' 2>&1";
  ASSERT_EQ(std::system(make.c_str()), 0) << make;
  std::string yaml = config_text(dir / "runs");
  yaml.replace(yaml.find("model: {name: ddpm"), yaml.find('\n', yaml.find("model: {name: ddpm")) - yaml.find("model: {name: ddpm"),
               "model: {name: torchscript, path: " + (dir / "ddpm.pt").string() +
                   ", inputs: [x, y], loss: module, predict_method: sample, predict_inputs: [x]}");
  bellows_trainer* t = nullptr;
  ASSERT_EQ(bellows_create_from_string(yaml.c_str(), nullptr, 0, &t), BELLOWS_OK) << bellows_last_error();
  Block block(64);
  ASSERT_EQ(block.push(t), BELLOWS_OK) << bellows_last_error();
  ASSERT_EQ(bellows_train(t, 0), BELLOWS_OK) << bellows_last_error();
  bellows_metrics m{};
  ASSERT_EQ(bellows_metrics_get(t, &m), BELLOWS_OK);
  EXPECT_EQ(m.step, 4);  // 2 epochs of 64 samples in batches of 32
  EXPECT_TRUE(std::isfinite(m.loss));

  float context[2 * 3] = {0.1f, 0.2f, 0.3f, 0.4f, 0.5f, 0.6f};
  std::vector<float> draws(2 * 3 * 8), again(2 * 3 * 8);
  bellows_tensor input = tensor(nullptr, context, {2, 3}), output = tensor(nullptr, draws.data(), {});
  bellows_predict_options o;
  bellows_predict_options_init(&o);
  o.samples = 3;
  o.seed = 5;
  ASSERT_EQ(bellows_predict(t, &input, &output, static_cast<int64_t>(draws.size()), &o), BELLOWS_OK) << bellows_last_error();
  EXPECT_EQ(output.ndim, 3);
  EXPECT_EQ(output.shape[0], 2);
  EXPECT_EQ(output.shape[1], 3);
  EXPECT_EQ(output.shape[2], 8);
  for (float v : draws) EXPECT_TRUE(std::isfinite(v));
  EXPECT_NE(draws[0], draws[8]);  // the draws differ
  bellows_tensor output2 = tensor(nullptr, again.data(), {});
  ASSERT_EQ(bellows_predict(t, &input, &output2, static_cast<int64_t>(again.size()), &o), BELLOWS_OK) << bellows_last_error();
  EXPECT_EQ(draws, again);  // the same seed, the same draws

  char path[4096];
  ASSERT_EQ(bellows_save(t, path, sizeof path), BELLOWS_OK) << bellows_last_error();
  const auto inspect = run_cli(std::string("ckpt inspect '") + path + "'");
  EXPECT_EQ(inspect.code, 0) << inspect.err;
  EXPECT_NE(inspect.out.find("context.0.weight"), std::string::npos) << inspect.out;  // the Python names
  EXPECT_NE(inspect.out.find("blocks.1.fc2.bias"), std::string::npos) << inspect.out;
  EXPECT_EQ(bellows_destroy(t), BELLOWS_OK);
}

}  // namespace
