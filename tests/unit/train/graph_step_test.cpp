// Whole steps as graphs (train/step_graph.h) on the CPU: which runs can be captured, and the trainer's graph path
// (warm-up, capture, replays on static inputs, the learning rate on the device, host counters, fallbacks) through
// the eager twin, against the same run trained eagerly.
#include <ATen/ATen.h>
#include <gtest/gtest.h>
#include <torch/nn/modules/linear.h>
#include <torch/utils.h>

#include "bellows/data/synthetic.h"
#include "bellows/data/tensor_source.h"
#include "bellows/models/mlp.h"
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
  EXPECT_EQ(with([](auto& d) { d.accumulation_steps = 4; }), "accumulation over 4 micro-batches: a graph holds one whole step of one batch");
  EXPECT_EQ(with([](auto& d) { d.micro_split = 2; }),
            "each batch runs as 2 micro-batches (batch-size finder): a graph holds one whole step of one batch");
  EXPECT_EQ(with([](auto& d) { d.ema = true; }), "EMA: its decay changes with the step on the host");
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
  FitResult result;
  std::int64_t optimizer_steps = 0;
  Counts counts;
  std::shared_ptr<Messages> messages = std::make_shared<Messages>();
};

// An MLP regression with AdamW (fused on the CPU), warm-up + cosine, clipping, `samples` samples in batches of 16.
TrainedRun train(const std::string& compile, std::int64_t samples, bool fail_capture = false, bool ema = false) {
  torch::manual_seed(7);
  models::MlpOptions mo;
  mo.in_features = 8;
  mo.hidden = {32, 32};
  mo.out_features = 1;
  auto model = std::make_shared<models::MlpImpl>(mo);
  auto task = models::make_regression_task([](torch::nn::Module& m, const at::Tensor& x) { return static_cast<models::MlpImpl&>(m).forward(x); });
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
  if (ema) o.ema = EmaOptions{};
  TrainedRun run;
  o.compile = compile == "cuda_graph" ? Compile::kCudaGraph : Compile::kOff;
  if (compile == "cuda_graph") {
    Counts* counts = &run.counts;
    o.step_graph_factory = [counts, fail_capture] { return std::make_unique<CountingGraph>(counts, fail_capture); };
  }
  Trainer trainer(model, task, o);
  trainer.add_sink(run.messages);
  run.result = trainer.fit(source);
  for (const auto& p : model->parameters()) run.params.push_back(p.detach().clone());
  run.optimizer_steps = trainer.optimizer().steps();
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
  const TrainedRun graphed = train("cuda_graph", 160, false, /*ema=*/true);
  EXPECT_EQ(graphed.counts.warm_ups + graphed.counts.captures + graphed.counts.replays, 0);
  EXPECT_TRUE(graphed.messages->has("compile: cuda_graph: every step runs eagerly: EMA: its decay changes with the step on the host"));
  EXPECT_EQ(graphed.result.steps, 20);
}

}  // namespace step_graph_test
}  // namespace bellows::train
