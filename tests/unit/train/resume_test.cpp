// Exact resume: a run stopped at a step (mid-epoch, workers and prefetch on, dropout drawing from the RNG,
// EMA, a cosine schedule) and resumed from its checkpoint ends with bitwise the same parameters, optimizer
// state and losses as the run that was never stopped.
#include <ATen/ATen.h>
#include <fmt/format.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <torch/utils.h>
#include <unistd.h>

#include <atomic>
#include <filesystem>

#include "bellows/ckpt/checkpoint.h"
#include "bellows/data/loader.h"
#include "bellows/data/synthetic.h"
#include "bellows/data/tensor_dataset.h"
#include "bellows/models/mlp.h"
#include "bellows/models/tasks.h"
#include "bellows/train/trainer.h"
#include "bellows/util/error.h"

namespace bellows::train {
namespace {

namespace fs = std::filesystem;
using models::MlpImpl;
using ::testing::HasSubstr;

std::shared_ptr<MlpImpl> make_resume_mlp(std::uint64_t seed, std::int64_t hidden = 16) {
  torch::manual_seed(seed);
  models::MlpOptions o;
  o.in_features = 8;
  o.hidden = {hidden, hidden};
  o.out_features = 1;
  o.dropout = 0.2;  // draws from the CPU generator every step
  return std::make_shared<MlpImpl>(o);
}

std::shared_ptr<Task> task() {
  return models::make_regression_task([](torch::nn::Module& m, const at::Tensor& x) { return static_cast<MlpImpl&>(m).forward(x); });
}

std::unique_ptr<data::Loader> loader() {
  data::SyntheticOptions so;
  so.samples = 330;
  so.features = 8;
  so.seed = 3;
  auto ds = std::make_shared<data::TensorDataset>(data::make_synthetic(so));
  data::LoaderOptions lo;
  lo.batch_size = 16;  // 21 batches per epoch, the last one short
  lo.workers = 2;
  lo.prefetch = 3;
  return std::make_unique<data::Loader>(ds, data::Sampler(ds->size(), data::SamplerOptions{.kind = "shuffle", .seed = 11}), lo);
}

TrainerOptions options(const fs::path& dir) {
  TrainerOptions o;
  o.epochs = 3;
  o.optimizer.type = "adamw";
  o.optimizer.lr = 0.01;
  o.schedule.type = "cosine";
  o.schedule.warmup_steps = 5;
  o.schedule.total_steps = 63;  // fixed, so a run cut short by max_steps decays the same way
  o.ema = EmaOptions{0.9, 1, 0};
  o.log_every_n_steps = 1;
  o.checkpoint.dir = dir;
  o.checkpoint.keep_last = 2;
  o.checkpoint.every_n_steps = 10;  // written by the background writer while training goes on
  return o;
}

// Stops the run after `at` optimizer steps, like a SIGINT arriving during that step.
class StopAt final : public obs::Sink {
 public:
  StopAt(std::int64_t at, std::atomic<bool>* flag) : at_(at), flag_(flag) {}
  void on_step(const obs::StepRecord& r) override {
    if (r.step == at_) flag_->store(true);
  }
  void on_run_end(const obs::RunEnd&) override {}

 private:
  std::int64_t at_;
  std::atomic<bool>* flag_;
};

fs::path fresh(const std::string& tag) {
  const fs::path d = fs::path(::testing::TempDir()) / fmt::format("bellows_resume_{}_{}", tag, ::getpid());
  fs::remove_all(d);
  return d;
}

TEST(Resume, StoppedAndResumedRunIsBitwiseTheUninterruptedOne) {
  at::globalContext().setDeterministicAlgorithms(true, false);
  // A: uninterrupted, 3 epochs = 63 steps.
  auto model_a = make_resume_mlp(1);
  Trainer a(model_a, task(), options(fresh("a")));
  auto data_a = loader();
  const FitResult ra = a.fit(*data_a);
  ASSERT_EQ(ra.steps, 63);

  for (std::int64_t stop : {27, 21, 50}) {  // mid-epoch, exactly at an epoch end, in the last epoch
    const fs::path dir = fresh(fmt::format("b{}", stop));
    std::atomic<bool> flag{false};
    TrainerOptions ob = options(dir);
    ob.stop_flag = &flag;
    // At an epoch's last step the step record is emitted after the stop check, so that case stops by
    // max_steps (its end-of-run checkpoint) instead of the flag.
    const bool epoch_end = stop % 21 == 0;
    if (epoch_end) ob.max_steps = stop;
    {
      Trainer b(make_resume_mlp(1), task(), ob);
      if (!epoch_end) b.add_sink(std::make_shared<StopAt>(stop, &flag));
      auto data_b = loader();
      const FitResult rb = b.fit(*data_b);
      ASSERT_EQ(rb.interrupted, !epoch_end);
      ASSERT_EQ(rb.steps, stop);
      ASSERT_EQ(rb.checkpoint.filename(), ckpt::checkpoint_name(stop));
    }
    torch::manual_seed(999);  // the resumed process starts from another RNG state and other weights
    auto model_c = make_resume_mlp(77);
    Trainer c(model_c, task(), options(fresh(fmt::format("c{}", stop))));  // its own checkpoints go elsewhere
    auto data_c = loader();
    const auto latest = ckpt::find_latest_valid(dir);
    ASSERT_TRUE(latest.has_value());
    c.restore(ckpt::load_checkpoint(*latest), data_c.get());
    const FitResult rc = c.fit(*data_c);
    EXPECT_EQ(rc.steps, 63) << "stopped at " << stop;
    EXPECT_EQ(rc.final_loss, ra.final_loss) << "stopped at " << stop;
    const auto pa = model_a->named_parameters(), pc = model_c->named_parameters();
    for (const auto& p : pa) EXPECT_TRUE(p.value().equal(pc[p.key()])) << p.key() << " after a stop at " << stop;
    const StateDict sa = a.state_dict(), sc = c.state_dict();
    for (const auto& [key, t] : sa) EXPECT_TRUE(t.equal(sc.at(key))) << key << " after a stop at " << stop;
    if (stop == 50) {
      // step 40 was written by the background writer (every_n_steps) while the run went on.
      Trainer d(make_resume_mlp(5), task(), options(fresh("d")));
      auto data_d = loader();
      d.restore(ckpt::load_checkpoint(dir / ckpt::checkpoint_name(40)), data_d.get());
      d.fit(*data_d);
      for (const auto& [key, t] : sa) EXPECT_TRUE(t.equal(d.state_dict().at(key))) << key << " resumed from step 40";
    }
  }
  at::globalContext().setDeterministicAlgorithms(false, false);
}

TEST(Resume, ShapeMismatchListsTheTensors) {
  const fs::path dir = fresh("shape");
  TrainerOptions o = options(dir);
  o.epochs = 1;
  o.max_steps = 2;
  Trainer a(make_resume_mlp(1), task(), o);
  auto d = loader();
  a.fit(*d);
  Trainer wider(make_resume_mlp(1, 32), task(), o);
  auto d2 = loader();
  try {
    wider.restore(ckpt::load_checkpoint(*ckpt::find_latest_valid(dir)), d2.get());
    ADD_FAILURE() << "a wider model accepted the checkpoint";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kData);
    EXPECT_THAT(e.message(), HasSubstr("shape [16, 8] in the checkpoint, [32, 8] in the model"));
  }
  Trainer lenient(make_resume_mlp(1, 32), task(), o);
  auto d3 = loader();
  const auto differences = lenient.restore(ckpt::load_checkpoint(*ckpt::find_latest_valid(dir)), d3.get(), /*strict=*/false);
  EXPECT_FALSE(differences.empty());
}

// Device-agnostic reload, on the CPU twin (and on a GPU when the test machine has one): the checkpoint's
// tensors are CPU tensors with the model's dtypes (float32 weights, int64 BatchNorm counters); restoring
// copies them into the parameters and buffers where they live, in place, keeping their device and dtype.
TEST(Resume, CheckpointTensorsAreCpuTensorsLoadedOntoTheModelsDevice) {
  const auto make = [](std::uint64_t seed) {
    torch::manual_seed(seed);
    models::MlpOptions o;
    o.in_features = 8;
    o.hidden = {16};
    o.norm = "batch";  // float32 running statistics and an int64 counter
    return std::make_shared<MlpImpl>(o);
  };
  std::vector<c10::Device> devices = {c10::Device(c10::kCPU)};
#ifdef BELLOWS_TEST_HAVE_CUDA
  if (at::hasCUDA()) devices.emplace_back(c10::kCUDA, 0);
#endif
  const fs::path dir = fresh("device");
  TrainerOptions o = options(dir);
  o.epochs = 1;
  o.max_steps = 4;
  auto trained = make(1);
  {
    Trainer a(trained, task(), o);
    auto d = loader();
    a.fit(*d);
  }
  const ckpt::Checkpoint cp = ckpt::load_checkpoint(*ckpt::find_latest_valid(dir));
  ASSERT_TRUE(cp.model.count("layers.1.num_batches_tracked"));
  for (const auto& [name, t] : cp.model) {
    EXPECT_TRUE(t.device().is_cpu()) << name;
    EXPECT_EQ(t.scalar_type(), name.ends_with("num_batches_tracked") ? at::kLong : at::kFloat) << name;
  }
  EXPECT_EQ(cp.model.at("layers.1.num_batches_tracked").item<std::int64_t>(), 4);
  for (const auto& device : devices) {
    TrainerOptions od = options(fresh("device-" + device.str()));
    od.device = device;
    auto model = make(2);
    Trainer t(model, task(), od);  // moves the model to `device`
    std::map<std::string, const void*> storage;
    for (const auto& p : model->named_parameters()) storage[p.key()] = p.value().data_ptr();
    auto d = loader();
    t.restore(cp, d.get());
    for (const auto& p : model->named_parameters()) {
      EXPECT_EQ(p.value().device(), device) << p.key();
      EXPECT_EQ(p.value().data_ptr(), storage[p.key()]) << p.key() << ": loaded in place, the optimizer's references hold";
      EXPECT_TRUE(p.value().cpu().equal(cp.model.at(p.key()))) << p.key();
    }
    for (const auto& b : model->named_buffers()) {
      EXPECT_EQ(b.value().device(), device) << b.key();
      EXPECT_EQ(b.value().scalar_type(), cp.model.at(b.key()).scalar_type()) << b.key();
      EXPECT_TRUE(b.value().cpu().equal(cp.model.at(b.key()))) << b.key();
    }
  }
}

// checkpoint.every_n_minutes: a period shorter than a step writes after every step; an hour writes none
// before the end. Each checkpoint names why it was written.
TEST(Resume, EveryNMinutesWritesByTheClock) {
  for (const double minutes : {1e-9, 60.0}) {
    const fs::path dir = fresh(fmt::format("minutes{}", minutes > 1 ? 60 : 0));
    TrainerOptions o = options(dir);
    o.epochs = 1;
    o.max_steps = 5;
    o.checkpoint.every_n_steps = 0;
    o.checkpoint.every_n_minutes = minutes;
    o.checkpoint.keep_last = 0;  // keep all
    Trainer t(make_resume_mlp(1), task(), o);
    auto d = loader();
    t.fit(*d);
    const auto all = ckpt::list_checkpoints(dir);
    std::vector<std::string> reasons;
    for (const auto& p : all) reasons.push_back(ckpt::read_manifest(p).info.value("reason", ""));
    if (minutes < 1) {
      EXPECT_EQ(reasons, (std::vector<std::string>{"every_n_minutes", "every_n_minutes", "every_n_minutes", "every_n_minutes", "end"}));
      EXPECT_EQ(all.front().filename(), ckpt::checkpoint_name(1));
    } else {
      EXPECT_EQ(reasons, (std::vector<std::string>{"end"}));
    }
  }
}

// An evaluation score that follows a script, one value per evaluation (the validation data is one batch), so
// which checkpoint is the best is known in advance.
class ScriptedScoreTask final : public Task {
 public:
  explicit ScriptedScoreTask(std::vector<double> scores) : scores_(std::move(scores)) {}
  StepOutput step(torch::nn::Module& m, const data::Batch& b) override { return inner_->step(m, b); }
  StepOutput eval_step(torch::nn::Module& m, const data::Batch& b) override {
    StepOutput out = inner_->eval_step(m, b);
    out.metrics.emplace_back("score", at::scalar_tensor(scores_.at(next_++), at::kDouble));
    return out;
  }
  std::string monitor() const override { return "score"; }

 private:
  std::shared_ptr<Task> inner_ = task();
  std::vector<double> scores_;
  std::size_t next_ = 0;
};

std::vector<std::string> checkpoint_names(const fs::path& dir) {
  std::vector<std::string> names;
  for (const auto& p : ckpt::list_checkpoints(dir)) names.push_back(p.filename().string());
  return names;
}

// checkpoint.keep_best across a resume: the best checkpoint of the first run (step 20) must survive the pruning
// of the second, whose later evaluations are worse than it but better than the last one before the stop.
TEST(Resume, TheBestCheckpointSurvivesPruningAfterAResume) {
  const fs::path dir = fresh("best");
  auto val_data = std::make_shared<data::TensorDataset>(data::make_synthetic({.samples = 16, .features = 8, .seed = 4}));
  const auto val = [&] {
    return std::make_unique<data::Loader>(val_data, data::Sampler(16, data::SamplerOptions{}), data::LoaderOptions{.batch_size = 16});
  };
  TrainerOptions o = options(dir);
  o.ema.reset();
  o.epochs = 100;
  o.max_steps = 30;
  o.eval_every_n_steps = 10;
  o.checkpoint.every_n_steps = 10;
  o.checkpoint.keep_last = 1;
  o.checkpoint.keep_best = true;
  {
    Trainer first(make_resume_mlp(1), std::make_shared<ScriptedScoreTask>(std::vector<double>{5, 1, 4}), o);
    auto train_data = loader();
    auto v = val();
    first.fit(*train_data, v.get());
  }
  ASSERT_EQ(checkpoint_names(dir), (std::vector<std::string>{ckpt::checkpoint_name(20), ckpt::checkpoint_name(30)}));
  const nlohmann::json info30 = ckpt::read_manifest(dir / ckpt::checkpoint_name(30)).info;
  EXPECT_EQ(info30["monitor"]["value"], 4.0) << "the last evaluation";
  EXPECT_EQ(info30["best"]["value"], 1.0);
  EXPECT_EQ(info30["best"]["checkpoint"], ckpt::checkpoint_name(20));

  o.max_steps = 50;
  Trainer second(make_resume_mlp(2), std::make_shared<ScriptedScoreTask>(std::vector<double>{3, 6}), o);
  auto train_data = loader();
  auto v = val();
  second.restore(ckpt::load_checkpoint(dir / ckpt::checkpoint_name(30)), train_data.get());
  second.fit(*train_data, v.get());
  // Step 40 scored 3: better than the last evaluation before the stop (4), worse than the best (1).
  EXPECT_EQ(checkpoint_names(dir), (std::vector<std::string>{ckpt::checkpoint_name(20), ckpt::checkpoint_name(50)}));
  const nlohmann::json info50 = ckpt::read_manifest(dir / ckpt::checkpoint_name(50)).info;
  EXPECT_EQ(info50["monitor"]["value"], 6.0);
  EXPECT_EQ(info50["best"]["value"], 1.0);
  EXPECT_EQ(info50["best"]["checkpoint"], ckpt::checkpoint_name(20));
}

}  // namespace
}  // namespace bellows::train
