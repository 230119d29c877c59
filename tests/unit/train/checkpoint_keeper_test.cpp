// Checkpoint bookkeeping (train/checkpoint_keeper.h) on its own: when to write (every n steps, never after the last
// planned step, every n minutes asked once until written, on a stop, not without a directory), the best checkpoint by
// the monitored metric kept through pruning and named in every manifest (also after a resume), and a background write
// that fails stopping the run at the next step.
#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <chrono>
#include <fstream>
#include <thread>

#include "bellows/ckpt/checkpoint.h"
#include "bellows/dist/strategy.h"
#include "bellows/train/checkpoint_keeper.h"
#include "bellows/util/error.h"
#include "test_util.h"

namespace bellows::train {
namespace checkpoint_keeper_test {

namespace fs = std::filesystem;

// A small checkpoint of `step`, as the trainer's snapshot makes one.
std::function<ckpt::Checkpoint()> snapshot(std::int64_t step) {
  return [step] {
    ckpt::Checkpoint c;
    c.step = step;
    c.model = {{"w", at::full({2}, static_cast<float>(step))}};
    c.state = {{"counters.step", at::scalar_tensor(step, at::kLong)}};
    return c;
  };
}

TEST(CheckpointKeeper, DecidesByStepsByTimeAndOnAStop) {
  const test_support::TempDir tmp("keeper_decides");
  dist::SingleDevice single;
  std::vector<std::string> said;
  CheckpointOptions o;
  o.dir = tmp.path() / "checkpoints";
  o.every_n_steps = 2;
  CheckpointKeeper keeper(o, single, "loss", true, [&](const std::string& t) { said.push_back(t); });
  keeper.start_fit();
  EXPECT_EQ(keeper.after_step(1, false, false).checkpoint, "");
  EXPECT_EQ(keeper.after_step(2, false, false).checkpoint, "every_n_steps");
  EXPECT_EQ(keeper.after_step(4, false, /*done=*/true).checkpoint, "") << "the end writes its own";
  const CheckpointKeeper::Decision stop = keeper.after_step(5, true, false);
  EXPECT_TRUE(stop.stop);
  EXPECT_EQ(stop.checkpoint, "stop");
  EXPECT_TRUE(stop.wait);

  CheckpointOptions timed = o;
  timed.every_n_steps = 0;
  timed.every_n_minutes = 1e-6;  // due after 60 microseconds
  timed.on_stop = false;
  CheckpointKeeper clock(timed, single, "loss", true, [&](const std::string& t) { said.push_back(t); });
  clock.start_fit();
  std::this_thread::sleep_for(std::chrono::milliseconds(2));
  EXPECT_EQ(clock.after_step(1, false, false).checkpoint, "every_n_minutes");
  std::this_thread::sleep_for(std::chrono::milliseconds(2));
  EXPECT_EQ(clock.after_step(2, false, false).checkpoint, "") << "asked once, until a checkpoint is written";
  clock.save(2, "every_n_minutes", /*wait=*/true, snapshot(2));
  std::this_thread::sleep_for(std::chrono::milliseconds(2));
  EXPECT_EQ(clock.after_step(3, false, false).checkpoint, "every_n_minutes") << "due again after the write";
  const CheckpointKeeper::Decision quiet_stop = clock.after_step(4, true, false);
  EXPECT_TRUE(quiet_stop.stop);
  EXPECT_EQ(quiet_stop.checkpoint, "") << "on_stop: false";

  CheckpointKeeper none(CheckpointOptions{}, single, "loss", true, [](const std::string&) {});
  none.start_fit();
  EXPECT_EQ(none.after_step(2, false, false).checkpoint, "") << "no directory: no checkpoints";
  EXPECT_TRUE(none.after_step(3, true, false).stop);
  EXPECT_THROW(none.save(3, "api", true, snapshot(3)), Error);
}

TEST(CheckpointKeeper, TheBestCheckpointSurvivesPruningAndIsNamedAfterAResume) {
  const test_support::TempDir tmp("keeper_best");
  dist::SingleDevice single;
  CheckpointOptions o;
  o.dir = tmp.path() / "checkpoints";
  o.keep_last = 1;
  std::vector<std::string> said;
  CheckpointKeeper keeper(o, single, "loss", /*lower_is_better=*/true, [&](const std::string& t) { said.push_back(t); });
  keeper.start_fit();
  const std::vector<double> evals = {0.5, 0.9, 0.7};
  for (std::int64_t step = 1; step <= 3; ++step) {
    keeper.observe(evals[static_cast<std::size_t>(step - 1)]);
    keeper.save(step, "every_n_steps", /*wait=*/true, snapshot(step));
  }
  std::vector<std::string> kept;
  for (const auto& p : ckpt::list_checkpoints(o.dir)) kept.push_back(p.filename().string());
  EXPECT_EQ(kept, (std::vector<std::string>{ckpt::checkpoint_name(1), ckpt::checkpoint_name(3)}));
  const ckpt::Checkpoint last = ckpt::load_checkpoint(o.dir / ckpt::checkpoint_name(3));
  EXPECT_EQ(last.info["reason"], "every_n_steps");
  EXPECT_EQ(last.info["monitor"]["value"], 0.7);
  EXPECT_EQ(last.info["best"]["value"], 0.5);
  EXPECT_EQ(last.info["best"]["checkpoint"], ckpt::checkpoint_name(1));
  ASSERT_EQ(said.size(), 3u);
  EXPECT_NE(said[0].find("the step waited"), std::string::npos) << said[0];

  // A resumed run's keeper compares with the best of the manifest, and keeps protecting it.
  CheckpointKeeper resumed(o, single, "loss", true, [](const std::string&) {});
  resumed.restore(last.info);
  resumed.start_fit();
  resumed.observe(0.6);
  resumed.save(4, "every_n_steps", true, snapshot(4));
  const ckpt::Checkpoint next = ckpt::load_checkpoint(o.dir / ckpt::checkpoint_name(4));
  EXPECT_EQ(next.info["best"]["value"], 0.5);
  EXPECT_EQ(next.info["best"]["checkpoint"], ckpt::checkpoint_name(1));
  EXPECT_TRUE(fs::exists(o.dir / ckpt::checkpoint_name(1)));
  EXPECT_FALSE(fs::exists(o.dir / ckpt::checkpoint_name(3)));
}

TEST(CheckpointKeeper, AFailedBackgroundWriteStopsTheRunAtTheNextStep) {
  const test_support::TempDir tmp("keeper_fails");
  std::ofstream(tmp.path() / "a-file") << "not a directory";
  dist::SingleDevice single;
  CheckpointOptions o;
  o.dir = tmp.path() / "a-file" / "checkpoints";  // cannot be made
  CheckpointKeeper keeper(o, single, "loss", true, [](const std::string&) {});
  keeper.start_fit();
  keeper.save(1, "every_n_steps", /*wait=*/false, snapshot(1));
  bool stopped = false;
  for (int i = 0; i < 200 && !stopped; ++i) {  // the write ends in the background; the next step collects it
    try {
      keeper.after_step(2 + i, false, false);
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    } catch (const std::exception&) {
      stopped = true;
    }
  }
  EXPECT_TRUE(stopped);
}

}  // namespace checkpoint_keeper_test
}  // namespace bellows::train
