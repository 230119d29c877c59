// The training loop's contracts: accumulation equivalence, clipping after unscale, skipped steps that leave
// everything untouched and do not advance the schedule, freezing, EMA, stopping, and bf16 vs fp32 agreement.
#include <ATen/ATen.h>
#include <gtest/gtest.h>
#include <torch/nn/modules/linear.h>
#include <torch/utils.h>

#include <filesystem>
#include <mutex>
#include <set>
#include <unistd.h>

#include <c10/util/Exception.h>

#include "bellows/data/synthetic.h"
#include "bellows/data/tensor_source.h"
#include "bellows/models/mlp.h"
#include "bellows/models/tasks.h"
#include "bellows/obs/memory.h"
#include "bellows/train/trainer.h"
#include "bellows/util/error.h"
#include "trainer_fixtures.h"

namespace bellows::train {
namespace {

using namespace test;  // trainer_fixtures.h

TEST(Trainer, AccumulationMatchesOneLargeBatch) {
  const auto data = dataset(64);
  auto a = make_mlp(1), b = make_mlp(1);
  TrainerOptions oa = sgd_options(), ob = sgd_options();
  oa.accumulation_steps = 4;  // 4 micro-batches of 16
  oa.max_steps = ob.max_steps = 1;
  Trainer ta(a, regression(), oa), tb(b, regression(), ob);
  auto sa = source(data, 16), sb = source(data, 64);
  EXPECT_EQ(ta.fit(sa).steps, 1);
  EXPECT_EQ(tb.fit(sb).steps, 1);
  EXPECT_LT(max_rel_diff(params_of(*a), params_of(*b)), 1e-6);
  // Without accumulation the same 16-sample first batch gives a different update: the test can fail.
  auto c = make_mlp(1);
  TrainerOptions oc = sgd_options();
  oc.max_steps = 1;
  Trainer tc(c, regression(), oc);
  auto sc = source(data, 16);
  tc.fit(sc);
  EXPECT_GT(max_rel_diff(params_of(*a), params_of(*c)), 1e-4);
}

TEST(Trainer, PartialAccumulationGroupAtEpochEndIsAMean) {
  // 48 samples, batches of 16, accumulation 2: steps over batches {1,2} and {3}; the lone batch is not halved.
  const auto data = dataset(48);
  auto a = make_mlp(2), b = make_mlp(2);
  TrainerOptions oa = sgd_options(), ob = sgd_options();
  oa.accumulation_steps = 2;
  Trainer ta(a, regression(), oa);
  auto sa = source(data, 16);
  EXPECT_EQ(ta.fit(sa).steps, 2);
  // Reference: batch of 32 then batch of 16.
  Trainer tb(b, regression(), ob);
  auto first = data::split_tail(data, 1.0 / 3.0);
  auto s32 = source(first.first, 32);
  tb.fit(s32);
  TrainerOptions oc = sgd_options();
  Trainer tc(b, regression(), oc);
  auto s16 = source(first.second, 16);
  tc.fit(s16);
  EXPECT_LT(max_rel_diff(params_of(*a), params_of(*b)), 1e-6);
}

TEST(Trainer, ClippingSeesUnscaledGradientsUnderFp16) {
  const auto data = dataset(64);
  auto run = [&](const std::string& precision) {
    auto m = make_mlp(4);
    TrainerOptions o = sgd_options();
    o.precision = precision;
    o.max_steps = 1;
    o.clip_max_norm = 1e-3;  // far below the true norm: clipping is active
    Trainer t(m, regression(), o);
    auto rec = std::make_shared<KeepingSink>();
    t.add_sink(rec);
    auto s = source(data, 64);
    t.fit(s);
    return std::make_pair(rec->value(0, "grad_norm"), params_of(*m));
  };
  const auto [norm32, p32] = run("fp32");
  const auto [norm16, p16] = run("fp16-mixed");
  // Scaled gradients would report a norm 65536 times larger.
  EXPECT_NEAR(norm16 / norm32, 1.0, 0.05);
  // After clipping to 1e-3, the update is tiny in both, and similar.
  EXPECT_LT(max_rel_diff(p32, p16), 1e-2);
}

// A task whose loss becomes non-finite on chosen calls.
struct PoisonTask : Task {
  std::shared_ptr<Task> inner = regression();
  std::set<int> poison;  // 0-based step() calls
  int calls = 0;
  StepOutput step(torch::nn::Module& m, const data::Batch& b) override {
    StepOutput out = inner->step(m, b);
    if (poison.count(calls++)) out.loss = out.loss * std::numeric_limits<float>::infinity();
    return out;
  }
};

TEST(Trainer, NonFiniteGradientsSkipTheStepOnTheDeviceAndAreReportedAtTheNextRecord) {
  const auto data = dataset(64);
  auto m = make_mlp(5);
  auto task = std::make_shared<PoisonTask>();
  task->poison = {2};
  TrainerOptions o = sgd_options();
  o.optimizer.type = "adamw";
  o.optimizer.lr = 0.01;
  o.schedule.type = "linear";
  o.schedule.total_steps = 10;
  o.schedule.warmup_steps = 0;
  o.log_every_n_steps = 2;
  o.on_nonfinite = OnNonfinite::kSkip;
  Trainer t(m, task, o);
  auto rec = std::make_shared<KeepingSink>();
  t.add_sink(rec);
  auto s = source(data, 16);  // 4 batches, poison the third
  const FitResult r = t.fit(s);
  // The host does not wait for the skip decision: the skipped call counts as a step (as in PyTorch, where the
  // scheduler steps after a skipped optimizer step too), and the skip is reported when its window is logged.
  EXPECT_EQ(r.steps, 4);
  EXPECT_EQ(r.skipped_steps, 1);
  EXPECT_EQ(t.precision().skipped_steps(), 1);
  ASSERT_EQ(rec->messages.size(), 1u);
  EXPECT_NE(rec->messages[0].find("1 of optimizer steps 3-4 skipped: non-finite gradients (the first at optimizer step 3, in the "
                                  "gradient of layers.0.weight"), std::string::npos) << rec->messages[0];
  ASSERT_EQ(rec->steps.size(), 2u);  // steps 2 and 4
  EXPECT_DOUBLE_EQ(rec->steps[1].lr, 0.01 * (1.0 - 3.0 / 10.0));
  EXPECT_EQ(t.optimizer().steps(), 4);
  // The parameters' own step counts (Adam's bias correction) left the skipped update out.
  for (const auto& [key, value] : t.optimizer().state_dict()) {
    if (key.rfind("step.", 0) == 0) EXPECT_EQ(value.item<double>(), 3.0) << key;
  }
}

// Snapshots parameters and optimizer state at the start of every step() call.
struct SnapshotTask : PoisonTask {
  Trainer* trainer = nullptr;
  std::vector<std::vector<at::Tensor>> params;
  std::vector<StateDict> optim;
  StepOutput step(torch::nn::Module& m, const data::Batch& b) override {
    params.push_back(params_of(m));
    StateDict copy;
    for (const auto& [k, v] : trainer->optimizer().state_dict()) copy[k] = v.clone();
    optim.push_back(copy);
    return PoisonTask::step(m, b);
  }
};

TEST(Trainer, SkippedStepLeavesParametersAndOptimizerStateUntouched) {
  const auto data = dataset(48);
  auto m = make_mlp(6);
  auto task = std::make_shared<SnapshotTask>();
  task->poison = {1};  // the second of three steps
  TrainerOptions o = sgd_options();
  o.optimizer.type = "adamw";
  o.on_nonfinite = OnNonfinite::kSkip;
  Trainer t(m, task, o);
  task->trainer = &t;
  auto s = source(data, 16);
  const FitResult r = t.fit(s);
  EXPECT_EQ(r.skipped_steps, 1);
  EXPECT_EQ(r.steps, 3);
  ASSERT_EQ(task->params.size(), 3u);
  // Between call 1 (poisoned) and call 2 only the skipped step ran: nothing may have changed.
  for (std::size_t i = 0; i < task->params[1].size(); ++i) EXPECT_TRUE(task->params[1][i].equal(task->params[2][i]));
  ASSERT_FALSE(task->optim[1].empty());
  for (const auto& [k, v] : task->optim[1]) {
    if (k == "steps") continue;  // the count of optimizer calls, skipped ones included
    EXPECT_TRUE(v.equal(task->optim[2].at(k))) << k;
  }
  // The clean step before it did change the parameters: the comparison above can fail.
  EXPECT_FALSE(task->params[0][0].equal(task->params[1][0]));
}

// Fault injection: an infinite gradient in one parameter (a hook multiplies it by inf in the third step's
// backward). Under fp32 and bf16-mixed the run stops at that step's record with a data error naming the step and
// the parameter, the weights being those before it; with on_nonfinite skip it trains on and says the same; under
// fp16-mixed "stop" is a config error (its scaler skips overflowing steps by design).
TEST(Trainer, NonFiniteGradientsStopTheRunNamingTheStepAndTheParameter) {
  const auto data = dataset(96);
  for (const std::string precision : {"fp32", "bf16-mixed"}) {
    auto m = make_mlp(8);
    auto task = std::make_shared<SnapshotTask>();
    const auto named = m->named_parameters();
    const std::string target = named.keys().at(2);  // a parameter after the first: the diagnosis must find it
    at::Tensor param = named[target];
    param.register_hook([task](const at::Tensor& g) { return task->calls == 3 ? g * std::numeric_limits<float>::infinity() : g; });
    TrainerOptions o = sgd_options();
    o.precision = precision;
    Trainer t(m, task, o);
    task->trainer = &t;
    auto rec = std::make_shared<KeepingSink>();
    t.add_sink(rec);
    auto s = source(data, 16);
    try {
      t.fit(s);
      ADD_FAILURE() << precision << ": the run went on past an infinite gradient";
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::kData);
      EXPECT_NE(e.message().find("the first at optimizer step 3, in the gradient of " + target + " (infinite)"), std::string::npos)
          << precision << ": " << e.message();
      EXPECT_NE(e.hint().find("train.on_nonfinite: skip"), std::string::npos);
    }
    ASSERT_EQ(task->params.size(), 3u) << precision;  // three step() calls, the third's update skipped
    const auto now = params_of(*m);
    for (std::size_t i = 0; i < now.size(); ++i) EXPECT_TRUE(now[i].equal(task->params[2][i])) << precision << ": parameter " << i;
    ASSERT_EQ(rec->steps.size(), 3u) << "the record of the skipped step reached the sinks first";
  }
  // skip: the same diagnosis, and training goes on.
  auto m = make_mlp(8);
  auto task = std::make_shared<SnapshotTask>();
  const std::string target = m->named_parameters().keys().at(2);
  m->named_parameters()[target].register_hook([task](const at::Tensor& g) { return task->calls == 3 ? g * std::numeric_limits<float>::quiet_NaN() : g; });
  TrainerOptions o = sgd_options();
  o.on_nonfinite = OnNonfinite::kSkip;
  Trainer t(m, task, o);
  task->trainer = &t;
  auto rec = std::make_shared<KeepingSink>();
  t.add_sink(rec);
  auto s = source(data, 16);
  const FitResult r = t.fit(s);
  EXPECT_EQ(r.steps, 6);
  EXPECT_EQ(r.skipped_steps, 1);
  ASSERT_EQ(rec->messages.size(), 1u);
  EXPECT_NE(rec->messages[0].find("the first at optimizer step 3, in the gradient of " + target + " (NaN)"), std::string::npos) << rec->messages[0];

  TrainerOptions fp16 = sgd_options();
  fp16.precision = "fp16-mixed";
  fp16.on_nonfinite = OnNonfinite::kStop;
  try {
    Trainer bad(make_mlp(8), regression(), fp16);
    ADD_FAILURE() << "fp16-mixed with on_nonfinite stop was accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kConfig);
    EXPECT_NE(e.message().find("fp16-mixed"), std::string::npos) << e.message();
  }
}

// The batch-size finder's mechanism (Trainer::set_micro_split): each loaded batch runs as near-equal parts, each
// part's loss weighted by its share of the batch. Even parts equal accumulation over the same samples, bitwise;
// uneven parts (62 = 16 + 16 + 15 + 15) still give the gradient of the whole batch.
TEST(Trainer, AMicroSplitIsAccumulationOverTheSameSamples) {
  const auto data = dataset(128);
  TrainerOptions o = sgd_options();
  o.max_steps = 2;
  auto split_model = make_mlp(12), planned_model = make_mlp(12);
  Trainer split(split_model, regression(), o);
  split.set_micro_split(4);
  auto loaded = source(data, 64);
  split.fit(loaded);
  TrainerOptions po = o;
  po.accumulation_steps = 4;
  Trainer planned(planned_model, regression(), po);
  auto small = source(data, 16);
  planned.fit(small);
  const auto a = params_of(*split_model), b = params_of(*planned_model);
  for (std::size_t i = 0; i < a.size(); ++i) EXPECT_TRUE(a[i].equal(b[i])) << "parameter " << i;
  EXPECT_THROW(split.set_micro_split(0), Error);

  const auto odd = dataset(62);
  TrainerOptions one = sgd_options();
  one.max_steps = 1;
  auto uneven_model = make_mlp(13), whole_model = make_mlp(13);
  Trainer uneven(uneven_model, regression(), one), whole(whole_model, regression(), one);
  uneven.set_micro_split(4);
  auto s1 = source(odd, 62), s2 = source(odd, 62);
  uneven.fit(s1);
  whole.fit(s2);
  EXPECT_LT(max_rel_diff(params_of(*uneven_model), params_of(*whole_model)), 1e-5);
}

TEST(Trainer, FrozenParametersDoNotChange) {
  const auto data = dataset(64);
  auto m = make_mlp(7);
  TrainerOptions o = sgd_options();
  o.freeze = {"layers.0.*"};
  Trainer t(m, regression(), o);
  EXPECT_EQ(t.frozen(), (std::vector<std::string>{"layers.0.weight", "layers.0.bias"}));
  const at::Tensor w0 = m->named_parameters()["layers.0.weight"].detach().clone();
  const at::Tensor w2 = m->named_parameters()["layers.2.weight"].detach().clone();
  auto s = source(data, 16);
  t.fit(s);
  EXPECT_TRUE(m->named_parameters()["layers.0.weight"].equal(w0));
  EXPECT_FALSE(m->named_parameters()["layers.2.weight"].equal(w2));
  EXPECT_FALSE(m->named_parameters()["layers.0.weight"].grad().defined());
}

TEST(Trainer, StopFlagStopsAtAStepBoundary) {
  const auto data = dataset(256);
  auto m = make_mlp(8);
  std::atomic<bool> stop{true};  // already set: stop after the first step
  TrainerOptions o = sgd_options();
  o.stop_flag = &stop;
  Trainer t(m, regression(), o);
  auto s = source(data, 16);
  const FitResult r = t.fit(s);
  EXPECT_TRUE(r.interrupted);
  EXPECT_EQ(r.steps, 1);
  EXPECT_EQ(r.epochs_completed, 0);
}

TEST(Trainer, EvaluatesWithEmaWeightsAndRestoresLiveOnes) {
  const auto data = dataset(64);
  auto m = make_mlp(9);
  TrainerOptions o = sgd_options();
  o.ema = EmaOptions{0.5, 1, 0};
  o.eval_with_ema = true;
  Trainer t(m, regression(), o);
  auto s = source(data, 16);
  t.fit(s);
  const auto live = params_of(*m);
  auto v = source(data, 64);
  t.evaluate(v);
  const auto after = params_of(*m);
  for (std::size_t i = 0; i < live.size(); ++i) EXPECT_TRUE(live[i].equal(after[i]));
  EXPECT_FALSE(t.ema()->averaged().front().second.equal(live.front()));
}

// The forward runs in the policy's dtype: under bf16-mixed (fp16-mixed) the model's Linear layers compute in
// bfloat16 (half), under fp32 in float. A fit that never entered autocast would still train and agree with fp32
// to a few percent (Demo.Bf16AndFp32LossesAgreeAfter200Steps): this catches it.
TEST(Trainer, TheForwardRunsInThePolicysDtype) {
  struct RecordingTask final : Task {
    std::shared_ptr<Task> inner = regression();
    std::set<at::ScalarType> seen;
    StepOutput step(torch::nn::Module& m, const data::Batch& b) override {
      seen.insert(static_cast<MlpImpl&>(m).forward(b.at("x")).scalar_type());
      return inner->step(m, b);
    }
  };
  const auto data = dataset(64);
  for (const auto& [precision, dtype] : {std::pair{"fp32", at::kFloat}, std::pair{"bf16-mixed", at::kBFloat16}, std::pair{"fp16-mixed", at::kHalf}}) {
    auto task = std::make_shared<RecordingTask>();
    TrainerOptions o = sgd_options();
    o.precision = precision;
    o.max_steps = 2;
    Trainer t(make_mlp(1), task, o);
    auto src = source(data, 16);
    t.fit(src);
    EXPECT_EQ(task->seen, std::set<at::ScalarType>{dtype}) << precision;
  }
}

TEST(Trainer, InvalidOptionsAreConfigErrors) {
  TrainerOptions o = sgd_options();
  o.accumulation_steps = 0;
  EXPECT_THROW({ Trainer t(make_mlp(1), regression(), o); }, bellows::Error);
  o = sgd_options();
  o.eval_with_ema = true;
  EXPECT_THROW({ Trainer t(make_mlp(1), regression(), o); }, bellows::Error);
}

}  // namespace
}  // namespace bellows::train
