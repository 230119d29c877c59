// Whole steps as graphs (train/step_graph.h) on the CPU: which runs can be captured, and the trainer's graph path
// (warm-up, capture, replays on static inputs, the learning rate on the device, host counters, fallbacks) through
// the eager twin, against the same run trained eagerly.
#include <ATen/ATen.h>
#include <gtest/gtest.h>
#include <torch/nn/modules/linear.h>
#include <torch/csrc/jit/api/module.h>
#include <torch/utils.h>

#include <array>
#include <chrono>
#include <functional>
#include <thread>

#include "bellows/data/synthetic.h"
#include "bellows/data/tensor_source.h"
#include "bellows/models/mlp.h"
#include "bellows/models/scripted.h"
#include "bellows/models/tasks.h"
#include "bellows/train/step_graph.h"
#include "bellows/train/trainer.h"

namespace bellows::train {
namespace step_graph_test {

TEST(StepGraphConditions, NameTheFirstReasonAStepCannotBeCaptured) {
  StepGraphConditions c;
  EXPECT_EQ(step_graph_unfit(c), "CUDA graphs need a CUDA device");
  c.cuda = true;
  EXPECT_EQ(step_graph_unfit(c), "");
  const auto with = [&](auto change) {
    StepGraphConditions d = c;
    change(d);
    return step_graph_unfit(d);
  };
  EXPECT_EQ(with([](auto& d) { d.accumulation_steps = 4; }), "");  // the graph holds every micro-batch of the step
  EXPECT_EQ(with([](auto& d) { d.micro_split = 2; }),
            "each batch runs as 2 micro-batches (batch-size finder): a graph holds one whole step of one batch");
  EXPECT_EQ(with([](auto& d) { d.ema = true; }), "");  // the EMA's update follows each replay, on the device
  EXPECT_EQ(with([](auto& d) { d.world_size = 2; }), "2 processes: the data-parallel all-reduce runs from backward hooks and is not captured");
  EXPECT_EQ(with([](auto& d) { d.detect_anomaly = true; }), "train.detect_anomaly checks every tensor on the host");
  EXPECT_EQ(with([](auto& d) { d.oom_recovery = true; }),
            "train.oom_recovery: true retries a step with smaller micro-batches, which a captured step cannot");
  EXPECT_EQ(with([](auto& d) { d.fused_optimizer = false; }),
            "the foreach optimizer reads the skip flag on the host (optimizer.implementation: fused captures)");
  EXPECT_EQ(with([](auto& d) { d.activation_checkpointing = true; }), "activation checkpointing saves and restores RNG states on the host");
  EXPECT_EQ(with([](auto& d) { d.sessions = true; }), "online training runs sessions over data that arrives while it trains");
}

// The eager twin, counting what the trainer asked of it; `fail_capture` makes the capture throw as CUDA does for an
// op it refuses.
struct Counts {
  int warm_ups = 0, captures = 0, replays = 0;
  int replay_sleep_ms = 0;  // a replay slower than an eager step by this much (compile: auto's trial)
};
class CountingGraph final : public StepGraph {
 public:
  CountingGraph(Counts* counts, bool fail_capture) : twin_(make_eager_step_graph()), counts_(counts), fail_capture_(fail_capture) {}
  void warm_up(const std::function<void()>& step) override {
    ++counts_->warm_ups;
    twin_->warm_up(step);
  }
  void capture(const std::function<void()>& step) override {
    ++counts_->captures;
    if (fail_capture_) throw std::runtime_error("operation not permitted when stream is capturing\nthe rest of the report");
    twin_->capture(step);
  }
  void replay() override {
    ++counts_->replays;
    if (counts_->replay_sleep_ms > 0) std::this_thread::sleep_for(std::chrono::milliseconds(counts_->replay_sleep_ms));
    twin_->replay();
  }
  std::string kind() const override { return twin_->kind(); }

 private:
  std::unique_ptr<StepGraph> twin_;
  Counts* counts_;
  bool fail_capture_;
};

struct Messages : obs::Sink {
  std::vector<std::string> texts;
  void on_message(const std::string& text) override { texts.push_back(text); }
  bool has(const std::string& part) const {
    return std::any_of(texts.begin(), texts.end(), [&](const std::string& t) { return t.find(part) != std::string::npos; });
  }
};

struct TrainedRun {
  std::vector<at::Tensor> params;
  std::int64_t skipped_steps = 0;
  std::int64_t ema_updates = 0;
  std::vector<std::array<std::string, 3>> revisions;  // plan rows decided while training
  std::vector<std::pair<std::string, double>> precision_metrics;  // the loss scale under fp16-mixed
  std::vector<at::Tensor> averaged;  // the EMA's weights, with ema
  FitResult result;
  std::int64_t optimizer_steps = 0;
  Counts counts;
  std::shared_ptr<Messages> messages = std::make_shared<Messages>();
};

// An MLP regression with AdamW (fused on the CPU), warm-up + cosine, clipping, `samples` samples in batches of 16.
// A user's TorchScript module (as `model.name: torchscript` loads one): two layers with a ReLU, defined in C++ and
// saved as a file from Python would be, the same weights every time (seeded).
std::filesystem::path scripted_file() {
  const std::filesystem::path path = std::filesystem::path(::testing::TempDir()) / "graph_step_scripted.pt";
  torch::manual_seed(11);
  torch::jit::Module m("Net");
  m.register_attribute("training", c10::BoolType::get(), true);
  m.register_parameter("w1", (at::randn({32, 8}) * 0.3).requires_grad_(), false);
  m.register_parameter("b1", at::zeros({32}).requires_grad_(), false);
  m.register_parameter("w2", (at::randn({1, 32}) * 0.3).requires_grad_(), false);
  m.define(R"JIT(
def forward(self, x):
    return torch.mm(torch.relu(torch.mm(x, self.w1.t()) + self.b1), self.w2.t())
)JIT");
  m.save(path.string());
  return path;
}

TrainedRun train(const std::string& compile, std::int64_t samples, bool fail_capture = false, bool ema = false,
                 std::int64_t accumulation = 1, const std::function<void(TrainerOptions&)>& tweak = {}, int replay_sleep_ms = 0,
                 bool scripted = false) {
  torch::manual_seed(7);
  models::MlpOptions mo;
  mo.in_features = 8;
  mo.hidden = {32, 32};
  mo.out_features = 1;
  std::shared_ptr<torch::nn::Module> model;
  std::shared_ptr<Task> task;
  if (scripted) {
    model = std::make_shared<models::ScriptedModule>(scripted_file());
    task = models::make_regression_task([](torch::nn::Module& m, const data::Batch& b) {
      return static_cast<models::ScriptedModule&>(m).run("forward", {{"", "x"}}, b).toTensor();
    });
  } else {
    model = std::make_shared<models::MlpImpl>(mo);
    task = models::make_regression_task([](torch::nn::Module& m, const at::Tensor& x) { return static_cast<models::MlpImpl&>(m).forward(x); });
  }
  data::SyntheticOptions so;
  so.samples = samples;
  so.features = 8;
  so.seed = 5;
  data::TensorSourceOptions to;
  to.batch_size = 16;
  to.shuffle = false;
  data::TensorSource source(data::make_synthetic(so), to);
  TrainerOptions o;
  o.optimizer.type = "adamw";
  o.optimizer.lr = 1e-2;
  o.optimizer.implementation = "fused";
  o.schedule.type = "cosine";
  o.schedule.warmup_steps = 3;
  o.clip_max_norm = 1.0;
  o.epochs = 2;
  o.oom_recovery = false;
  o.count_flops = false;
  o.log_every_n_steps = 4;
  o.accumulation_steps = accumulation;
  if (ema) o.ema = EmaOptions{.decay = 0.9, .every_n_steps = 1, .start_step = 5};
  if (tweak) tweak(o);
  TrainedRun run;
  o.compile = compile == "cuda_graph" ? Compile::kCudaGraph : compile == "auto" ? Compile::kAuto : Compile::kOff;
  run.counts.replay_sleep_ms = replay_sleep_ms;
  if (compile != "off") {
    Counts* counts = &run.counts;
    o.step_graph_factory = [counts, fail_capture] { return std::make_unique<CountingGraph>(counts, fail_capture); };
  }
  Trainer trainer(model, task, o);
  trainer.add_sink(run.messages);
  trainer.set_plan_revision([&run](const std::string& key, const std::string& value, const std::string& reason) {
    run.revisions.push_back({key, value, reason});
  });
  run.result = trainer.fit(source);
  for (const auto& p : model->parameters()) run.params.push_back(p.detach().clone());
  run.optimizer_steps = trainer.optimizer().steps();
  run.skipped_steps = trainer.precision().skipped_steps();
  run.precision_metrics = trainer.precision().metrics();
  if (trainer.ema()) {
    for (const auto& [name, t] : trainer.ema()->averaged()) run.averaged.push_back(t.clone());
    run.ema_updates = trainer.ema()->updates();
  }
  return run;
}

// The learning rate is a float32 tensor under a graph, a double otherwise: equal to float32's rounding.
void expect_same_training(const TrainedRun& graphed, const TrainedRun& eager) {
  EXPECT_EQ(graphed.result.steps, eager.result.steps);
  EXPECT_EQ(graphed.result.samples, eager.result.samples);
  EXPECT_EQ(graphed.optimizer_steps, eager.optimizer_steps);
  EXPECT_NEAR(graphed.result.final_loss, eager.result.final_loss, 1e-5 * std::abs(eager.result.final_loss) + 1e-7);
  ASSERT_EQ(graphed.params.size(), eager.params.size());
  for (std::size_t i = 0; i < eager.params.size(); ++i) {
    const double diff = (graphed.params[i] - eager.params[i]).abs().max().item<double>();
    EXPECT_LT(diff, 1e-5) << "parameter " << i;
  }
}

TEST(StepGraph, ReplaysTrainAsTheEagerStepsDo) {
  const TrainedRun eager = train("off", 160);  // 10 batches of 16 a epoch, 20 steps
  const TrainedRun graphed = train("cuda_graph", 160);
  expect_same_training(graphed, eager);
  EXPECT_EQ(graphed.counts.warm_ups, kStepGraphWarmup);
  EXPECT_EQ(graphed.counts.captures, 1);
  EXPECT_EQ(graphed.counts.replays, 20 - kStepGraphWarmup);
  EXPECT_TRUE(graphed.messages->has("compile: cuda_graph (eager twin): 3 warm-up steps, then step 4 is captured"))
      << ::testing::PrintToString(graphed.messages->texts);
  // The captured step changed something: training moved the weights away from the start.
  const TrainedRun one = train("off", 16);
  EXPECT_GT((graphed.params[0] - one.params[0]).abs().max().item<double>(), 1e-3);
}

TEST(StepGraph, ABatchOfOtherShapesRunsEagerlyAndSaysSo) {
  const TrainedRun eager = train("off", 150);  // 9 batches of 16 and one of 6 a epoch
  const TrainedRun graphed = train("cuda_graph", 150);
  expect_same_training(graphed, eager);
  EXPECT_EQ(graphed.counts.warm_ups + graphed.counts.replays, 18);  // the two short batches ran eagerly
  EXPECT_TRUE(graphed.messages->has("optimizer step 10's batch (x [6, 8], y [6, 1]) has other shapes than the captured one "
                                    "(x [16, 8], y [16, 1]): such steps run eagerly"))
      << ::testing::PrintToString(graphed.messages->texts);
}

// Accumulation: the graph holds both micro-batches of a step (two sets of static inputs, each loss over 2, one
// optimizer phase), and trains as the eager steps do; the epoch's last step, whose second batch is short, runs eagerly.
TEST(StepGraph, AccumulatedStepsAreCapturedWhole) {
  const TrainedRun eager = train("off", 160, false, false, /*accumulation=*/2);  // 5 steps of 2 x 16 an epoch
  const TrainedRun graphed = train("cuda_graph", 160, false, false, 2);
  expect_same_training(graphed, eager);
  EXPECT_EQ(graphed.result.steps, 10);
  EXPECT_EQ(graphed.counts.warm_ups, kStepGraphWarmup);
  EXPECT_EQ(graphed.counts.captures, 1);
  EXPECT_EQ(graphed.counts.replays, 10 - kStepGraphWarmup);
  const TrainedRun short_eager = train("off", 150, false, false, 2);  // the 5th step: 16 + 6 samples
  const TrainedRun short_graphed = train("cuda_graph", 150, false, false, 2);
  expect_same_training(short_graphed, short_eager);
  EXPECT_EQ(short_graphed.counts.warm_ups + short_graphed.counts.replays, 8);
  EXPECT_TRUE(short_graphed.messages->has("optimizer step 5's batch (x [16, 8], y [16, 1]; x [6, 8], y [6, 1]) has other shapes than the "
                                          "captured one (x [16, 8], y [16, 1]; x [16, 8], y [16, 1]): such steps run eagerly"))
      << ::testing::PrintToString(short_graphed.messages->texts);
}

TEST(StepGraph, ACaptureThatFailsFallsBackToEagerStepsFromThatStep) {
  const TrainedRun eager = train("off", 160);
  const TrainedRun graphed = train("cuda_graph", 160, /*fail_capture=*/true);
  expect_same_training(graphed, eager);
  EXPECT_EQ(graphed.counts.captures, 1);
  EXPECT_EQ(graphed.counts.replays, 0);
  EXPECT_TRUE(graphed.messages->has("compile: cuda_graph: capturing optimizer step 4 failed (operation not permitted when stream is "
                                    "capturing): this and every later step run eagerly"))
      << ::testing::PrintToString(graphed.messages->texts);
}

TEST(StepGraph, ARunThatCannotBeCapturedTrainsEagerlyAndSaysWhy) {
  const TrainedRun graphed = train("cuda_graph", 160, false, false, 1, [](TrainerOptions& o) { o.detect_anomaly = true; });
  EXPECT_EQ(graphed.counts.warm_ups + graphed.counts.captures + graphed.counts.replays, 0);
  EXPECT_TRUE(graphed.messages->has("compile: cuda_graph: every step runs eagerly: train.detect_anomaly checks every tensor on the host"));
  EXPECT_EQ(graphed.result.steps, 20);
}

// EMA under a graph: its update (copies before start_step 5, then averages weighted by the replay's skip flag) is
// captured with the step, its step-dependent weights filled before each replay, and the average is the eager run's;
// with ema.every_n_steps 2 it is updated after each replay instead (by the trainer, on the device), alike.
TEST(StepGraph, EmaUpdatesInsideTheGraphAsAfterEagerSteps) {
  const TrainedRun eager = train("off", 160, false, /*ema=*/true);
  const TrainedRun graphed = train("cuda_graph", 160, false, /*ema=*/true);
  expect_same_training(graphed, eager);
  EXPECT_EQ(graphed.counts.replays, 20 - kStepGraphWarmup);
  ASSERT_EQ(graphed.averaged.size(), eager.averaged.size());
  ASSERT_FALSE(eager.averaged.empty());
  for (std::size_t i = 0; i < eager.averaged.size(); ++i) {
    EXPECT_LT((graphed.averaged[i] - eager.averaged[i]).abs().max().item<double>(), 1e-5) << "EMA tensor " << i;
  }
  EXPECT_GT((eager.averaged[0] - eager.params[0]).abs().max().item<double>(), 1e-4);  // an average, not a copy
  EXPECT_EQ(graphed.ema_updates, eager.ema_updates);
  EXPECT_EQ(eager.ema_updates, 20 - 5 + 1);  // steps 5..20 average
  auto every_two = [](TrainerOptions& o) { o.ema->every_n_steps = 2; };
  const TrainedRun eager2 = train("off", 160, false, true, 1, every_two);
  const TrainedRun graphed2 = train("cuda_graph", 160, false, true, 1, every_two);
  for (std::size_t i = 0; i < eager2.averaged.size(); ++i) {
    EXPECT_LT((graphed2.averaged[i] - eager2.averaged[i]).abs().max().item<double>(), 1e-5) << "EMA tensor " << i;
  }
  EXPECT_EQ(graphed2.ema_updates, eager2.ema_updates);
}

// A user's TorchScript module under a graph (the scripted group of scripts/gpu_check.sh has not run on a GPU yet): the
// interpreter's ops are captured like the built-in modules' and train as its eager steps do.
TEST(StepGraph, AScriptedModuleTrainsAsItsEagerSteps) {
  const TrainedRun eager = train("off", 160, false, false, 1, {}, 0, /*scripted=*/true);
  const TrainedRun graphed = train("cuda_graph", 160, false, false, 1, {}, 0, /*scripted=*/true);
  expect_same_training(graphed, eager);
  EXPECT_EQ(graphed.counts.captures, 1);
  EXPECT_EQ(graphed.counts.replays, 20 - kStepGraphWarmup);
  const TrainedRun mlp = train("off", 160);
  EXPECT_GT((eager.params[0] - mlp.params[0].reshape(eager.params[0].sizes())).abs().max().item<double>(), 1e-6);  // not the MLP
}

// fp16-mixed's loss scaler inside the graph: a scale of 2^40 overflows the fp16 gradients, so the first steps are
// skipped on the device and the scale backs off by half each time, with no host read, until the gradients are finite;
// the graph's run skips the same steps, ends at the same scale and trains to the same weights as the eager run.
TEST(StepGraph, TheLossScalersSkipAndBackoffRunInsideTheGraph) {
  auto fp16 = [](TrainerOptions& o) {
    o.precision = "fp16-mixed";
    o.scaler.init_scale = 1099511627776.0;  // 2^40
    o.on_nonfinite = OnNonfinite::kSkip;
  };
  const TrainedRun eager = train("off", 160, false, false, 1, fp16);
  const TrainedRun graphed = train("cuda_graph", 160, false, false, 1, fp16);
  expect_same_training(graphed, eager);
  EXPECT_GT(eager.skipped_steps, kStepGraphWarmup);  // skips inside the replays too
  EXPECT_EQ(graphed.skipped_steps, eager.skipped_steps);
  EXPECT_EQ(graphed.precision_metrics, eager.precision_metrics);
  EXPECT_EQ(graphed.counts.replays, 20 - kStepGraphWarmup);
}

// compile: auto's verdict: the graph is kept when its replays took no longer than the eager steps, with both times,
// the samples per second and the graph's memory in the message.
TEST(StepGraph, TheTrialKeepsTheFasterWay) {
  const StepGraphChoice faster = choose_step_graph(1.0, 2.0, 16, 100'000'000);
  EXPECT_TRUE(faster.keep_graph);
  EXPECT_EQ(faster.message, "compile: auto: 5 replays took 1.000 ms a step (16000 samples/s), 5 eager steps 2.000 ms (8000 samples/s); "
                            "the graph holds 100.0 MB: the CUDA graph is kept (2.00x)");
  const StepGraphChoice slower = choose_step_graph(3.0, 2.0, 16, -1);
  EXPECT_FALSE(slower.keep_graph);
  EXPECT_EQ(slower.message, "compile: auto: 5 replays took 3.000 ms a step (5333 samples/s), 5 eager steps 2.000 ms (8000 samples/s): "
                            "eager steps from here on, the graph released");
}

// compile: auto in a trainer: after the warm-ups and the captured step, 5 replays and 5 eager steps are timed; replays
// made 30 ms slower lose, the graph goes, and the rest of the run is eager. Training is the eager run's throughout.
TEST(StepGraph, AutoTimesReplaysAgainstEagerStepsAndKeepsTheFaster) {
  const TrainedRun eager = train("off", 160);
  const TrainedRun slow = train("auto", 160, false, false, 1, {}, /*replay_sleep_ms=*/30);
  expect_same_training(slow, eager);
  EXPECT_EQ(slow.counts.warm_ups, kStepGraphWarmup);
  EXPECT_EQ(slow.counts.captures, 1);
  EXPECT_EQ(slow.counts.replays, 1 + kStepGraphTrialSteps);  // the captured step's, then the trial's; eager after
  EXPECT_TRUE(slow.messages->has("compile: auto (eager twin): 3 warm-up steps, then step 4 is captured; 5 replays are timed against 5 "
                                 "eager steps"))
      << ::testing::PrintToString(slow.messages->texts);
  EXPECT_TRUE(slow.messages->has("eager steps from here on, the graph released")) << ::testing::PrintToString(slow.messages->texts);
  // plan.json's compile row is revised with the choice and the numbers.
  ASSERT_EQ(slow.revisions.size(), 1u);
  EXPECT_EQ(slow.revisions[0][0], "compile");
  EXPECT_EQ(slow.revisions[0][1], "off");
  EXPECT_EQ(slow.revisions[0][2].rfind("auto, measured: 5 replays took ", 0), 0u) << slow.revisions[0][2];
  // Without the delay either may win on the CPU twin (the same work both ways); whichever is kept trains alike.
  const TrainedRun either = train("auto", 160);
  expect_same_training(either, eager);
  EXPECT_TRUE(either.messages->has("compile: auto: 5 replays took")) << ::testing::PrintToString(either.messages->texts);
  const bool kept = either.messages->has("the CUDA graph is kept");
  EXPECT_EQ(either.counts.replays, kept ? 20 - kStepGraphWarmup - kStepGraphTrialSteps : 1 + kStepGraphTrialSteps);
  ASSERT_EQ(either.revisions.size(), 1u);
  EXPECT_EQ(either.revisions[0][1], kept ? "cuda_graph" : "off");
}

}  // namespace step_graph_test
}  // namespace bellows::train
