// Online training (app/online.h): sessions that continue one another, and pushes from another thread while
// sessions train, checked sample by sample through a probe model that records every sample it trains on.
#include "bellows/app/online.h"

#include <gtest/gtest.h>
#include <torch/nn/modules/linear.h>
#include <unistd.h>

#include <algorithm>
#include <fstream>
#include <atomic>
#include <mutex>
#include <thread>

#include "bellows/app/schema.h"
#include "bellows/data/stream_buffer.h"
#include "bellows/models/registry.h"
#include "test_util.h"

namespace bellows::app {
namespace {

// What the probe task saw: every sample's id (x = [id, id, id, id], y = [2 id]) and rows that broke that pattern.
struct ProbeLog {
  std::mutex mutex;
  std::vector<float> ids;
  std::int64_t corrupt = 0;
};
ProbeLog& probe_log() {
  static ProbeLog log;
  return log;
}

class OnlineProbeTask final : public Task {
 public:
  StepOutput step(torch::nn::Module& model, const data::Batch& batch) override {
    const at::Tensor x = batch.at("x"), y = batch.at("y");
    {
      const at::Tensor ids = x.select(1, 0).contiguous();
      const bool same_row = at::equal(x, ids.unsqueeze(1).expand_as(x)) && at::equal(y.view({-1}), ids * 2);
      std::lock_guard lock(probe_log().mutex);
      const float* p = ids.data_ptr<float>();
      probe_log().ids.insert(probe_log().ids.end(), p, p + ids.numel());
      if (!same_row) ++probe_log().corrupt;
    }
    auto* linear = dynamic_cast<torch::nn::LinearImpl*>(&model);
    const at::Tensor out = linear->forward(x / 1000.0);
    return StepOutput{(out - y / 1000.0).pow(2).mean(), {}};
  }
};

models::ModelEntry online_probe_entry() {
  models::ModelEntry e;
  e.name = "online_probe";
  e.help = "test model: records the samples it trains on";
  e.add_keys = [](config::Schema&) {};
  e.build = [](const config::Config&, const models::ModelContext&) {
    return models::BuiltModel{std::make_shared<torch::nn::LinearImpl>(4, 1), std::make_shared<OnlineProbeTask>()};
  };
  return e;
}
const models::ModelRegistrar kOnlineProbeRegistered(online_probe_entry());

std::filesystem::path online_dir(const std::string& tag) {
  return std::filesystem::path(::testing::TempDir()) / (tag + "_" + std::to_string(getpid()));
}

config::Config online_config(const std::vector<std::string>& args) { return resolve_config_text("seed: 0\n", "<test>", args); }

TEST(Online, PushesWhileSessionsTrainLoseNothingAndCorruptNothing) {
  const config::Config c = online_config({"data.source=stream", "model.name=online_probe", "data.batch_size=16",
                                                         "data.val_fraction=0", "data.drop_last=false", "train.epochs=1",
                                                         "online.console=none", "data.stream.capacity=100000",
                                                         "data.stream.ready_samples=1", "schedule.type=constant",
                                                         "checkpoint.enabled=false", "output_dir=" + online_dir("online_push").string()});
  OnlineTrainer trainer(c);
  {
    std::lock_guard lock(probe_log().mutex);
    probe_log().ids.clear();
    probe_log().corrupt = 0;
  }
  constexpr int kSamples = 3000;
  std::atomic<bool> done{false};
  std::thread producer([&] {  // the "simulation": single samples and blocks of 7, as fast as it can
    for (int i = 0; i < kSamples;) {
      if (i % 50 == 0) std::this_thread::sleep_for(std::chrono::milliseconds(1));  // steps of a model, spread over the sessions
      if (i % 3 == 0 && i + 7 <= kSamples) {
        const at::Tensor ids = at::arange(i, i + 7, at::kFloat);
        trainer.push_many({{"x", ids.unsqueeze(1).expand({7, 4}).contiguous()}, {"y", (ids * 2).unsqueeze(1)}});
        i += 7;
      } else {
        trainer.push({{"x", at::full({4}, static_cast<float>(i))}, {"y", at::full({1}, 2.0f * static_cast<float>(i))}});
        i += 1;
      }
    }
    done = true;
  });
  int sessions = 0;
  while (!done.load() || trainer.buffered() > 0) {
    if (trainer.buffered() == 0) {
      std::this_thread::yield();
      continue;
    }
    if (sessions % 2 == 0) {
      trainer.train_async(1);
      EXPECT_TRUE(trainer.metrics().training || !trainer.poll());
      trainer.wait();
    } else {
      trainer.train(1);
    }
    ++sessions;
  }
  producer.join();
  const OnlineMetrics m = trainer.metrics();
  EXPECT_EQ(m.pushed, kSamples);
  EXPECT_EQ(m.dropped, 0);
  EXPECT_EQ(m.taken, kSamples);
  EXPECT_EQ(m.buffered, 0);
  EXPECT_EQ(m.sessions, sessions);
  EXPECT_GE(sessions, 2);
  std::lock_guard lock(probe_log().mutex);
  EXPECT_EQ(probe_log().corrupt, 0);
  std::vector<float> ids = probe_log().ids;
  std::sort(ids.begin(), ids.end());
  ASSERT_EQ(ids.size(), static_cast<std::size_t>(kSamples));  // one epoch per session: each sample trained once
  for (int i = 0; i < kSamples; ++i) ASSERT_EQ(ids[static_cast<std::size_t>(i)], static_cast<float>(i));
}

config::Config ddpm_online(const std::string& tag, std::vector<std::string> extra = {}) {
  std::vector<std::string> args{"data.source=stream", "model.name=ddpm", "model.context_features=3", "model.out_features=8",
                                "model.hidden=16", "model.steps=10", "data.batch_size=32", "data.val_fraction=0",
                                "train.epochs=2", "online.console=none", "schedule.type=constant", "ema.enabled=true",
                                "data.stream.ready_samples=64", "output_dir=" + online_dir(tag).string()};
  args.insert(args.end(), extra.begin(), extra.end());
  return online_config(args);
}

void push_ddpm(OnlineTrainer& t, std::int64_t n, std::uint64_t seed) {
  at::manual_seed(seed);
  const at::Tensor x = at::randn({n, 3});
  t.push_many({{"x", x}, {"y", at::cat({x, x, x.narrow(1, 0, 2)}, 1)}});
}

TEST(Online, SessionsContinueTheStepCountAndARestoreChangesNothingWhenItFails) {
  OnlineTrainer t(ddpm_online("online_sessions"));
  EXPECT_THROW(t.train(), NotReady);  // nothing pushed
  push_ddpm(t, 64, 1);
  const SessionResult first = t.train();
  EXPECT_EQ(first.session, 1);
  EXPECT_EQ(first.samples, 64);
  EXPECT_EQ(first.steps, 4);  // 2 epochs x 2 batches
  push_ddpm(t, 96, 2);
  const SessionResult second = t.train();
  EXPECT_EQ(second.steps, 6);
  EXPECT_EQ(second.fit.steps, 10);  // the count continues
  const std::filesystem::path saved = t.save();
  EXPECT_EQ(saved.filename().string(), "step-000000010");

  PredictOptions o;
  o.seed = 3;
  const at::Tensor context = at::randn({5, 3});
  const at::Tensor before = t.predict(context, o);
  EXPECT_EQ(before.sizes(), (std::vector<std::int64_t>{5, 8}));
  // A corrupt copy of the checkpoint: a kData error, and the trainer as it was.
  const auto bad = online_dir("online_sessions_bad") / "step-000000010";
  std::filesystem::create_directories(bad.parent_path());
  std::filesystem::copy(saved, bad, std::filesystem::copy_options::recursive | std::filesystem::copy_options::overwrite_existing);
  {
    std::fstream f(bad / "model.safetensors", std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(-4, std::ios::end);
    f.write("\x01\x02\x03\x04", 4);
  }
  const Error e = test_support::error_from([&] { t.restore(bad); });
  EXPECT_EQ(e.kind(), ErrorKind::kData);
  EXPECT_NE(e.message().find("model.safetensors"), std::string::npos) << e.message();
  EXPECT_TRUE(at::equal(t.predict(context, o), before));

  // A new trainer restored from the checkpoint predicts what the saved one did.
  OnlineTrainer restarted(ddpm_online("online_sessions_2"));
  EXPECT_THROW(restarted.predict(context, o), Error);  // untrained
  restarted.restore(saved);
  EXPECT_TRUE(at::equal(restarted.predict(context, o), before));
  push_ddpm(restarted, 64, 4);
  EXPECT_EQ(restarted.train().fit.steps, 14);
}

TEST(Online, OtherModelsPredictTheirOutputs) {
  // An MLP regression learns y = sum(x) online; predict is its forward pass, with the EMA weights when asked.
  OnlineTrainer t(online_config({"data.source=stream", "model.name=mlp", "model.in_features=4", "model.hidden=[16]",
                                 "data.batch_size=32", "data.val_fraction=0", "train.epochs=20", "online.console=none",
                                 "schedule.type=constant", "optim.lr=0.01", "data.stream.ready_samples=256",
                                 "output_dir=" + online_dir("online_mlp").string()}));
  at::manual_seed(0);
  const at::Tensor x = at::randn({256, 4});
  t.push_many({{"x", x}, {"y", x.sum(1, true)}});
  t.train();
  const at::Tensor probe = at::randn({8, 4});
  const at::Tensor y = t.predict(probe);
  EXPECT_EQ(y.sizes(), (std::vector<std::int64_t>{8, 1}));
  EXPECT_LT((y - probe.sum(1, true)).abs().max().item<float>(), 0.5f);
  const Error no_ema = test_support::error_from([&] { t.predict(probe, {}, true); });
  EXPECT_NE(no_ema.message().find("no EMA"), std::string::npos) << no_ema.message();
}

TEST(Online, ConfigErrorsNameTheKey) {
  // A decaying schedule needs an end; online training has none.
  const Error cosine = test_support::error_from([] { OnlineTrainer t(ddpm_online("online_cosine", {"schedule.type=cosine"})); });
  EXPECT_EQ(cosine.kind(), ErrorKind::kConfig);
  EXPECT_NE(cosine.message().find("schedule.total_steps"), std::string::npos) << cosine.message();
  const Error source = test_support::error_from([] {
    OnlineTrainer t(online_config({"online.console=none", "output_dir=" + online_dir("online_source").string()}));
  });
  EXPECT_NE(source.message().find("data.source: stream"), std::string::npos) << source.message();
  // The first push is checked against the model's keys; nothing is stored.
  OnlineTrainer t(ddpm_online("online_first_push"));
  const Error width = test_support::error_from([&] { t.push_many({{"x", at::zeros({2, 4})}, {"y", at::zeros({2, 8})}}); });
  EXPECT_NE(width.message().find("model.context_features is 3"), std::string::npos) << width.message();
  EXPECT_EQ(t.buffered(), 0);
  push_ddpm(t, 4, 5);
  const Error later = test_support::error_from([&] { t.push({{"x", at::zeros({3})}, {"y", at::zeros({7})}}); });
  EXPECT_EQ(later.kind(), ErrorKind::kData);
  EXPECT_EQ(t.buffered(), 4);
}

}  // namespace
}  // namespace bellows::app
