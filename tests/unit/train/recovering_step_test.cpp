// Out-of-memory recovery (train/recovering_step.h) and the out-of-memory report of a fit: a step that runs out of
// memory is a resource error naming the step and its phase; with recovery, it runs again with half the micro-batch and
// ends bitwise equal to a run planned with it (one rank and two); a micro-batch of one sample that still fails stops.
#include <ATen/ATen.h>
#include <c10/util/Exception.h>
#include <gtest/gtest.h>

#include <mutex>

#include "bellows/dist/strategy.h"
#include "bellows/obs/memory.h"
#include "bellows/precision/precision.h"
#include "bellows/train/recovering_step.h"
#include "bellows/util/error.h"
#include "bellows/util/module_tensors.h"
#include "dist/ranks.h"
#include "trainer_fixtures.h"

namespace bellows::train {
namespace recovering_step_test {

using namespace test;  // trainer_fixtures.h

// Fault injection: CPU allocations fail once the counted tensor memory would pass a limit (obs::CpuTensorLimit,
// the key cpu_tensor_limit_mb). A step that runs out of memory ends the fit with a resource error (exit code 4)
// that names the step, the phase it had finished, and what the memory held.
TEST(Trainer, AnAllocationFailureInAStepIsAResourceErrorNamingTheStep) {
  ASSERT_TRUE(obs::install_cpu_tracking());
  const auto data = dataset(64);
  auto m = make_mlp(9);
  TrainerOptions o = sgd_options();
  o.max_steps = 4;
  o.oom_recovery = false;  // recovery: the tests below
  Trainer t(m, regression(), o);
  auto s = source(data, 16);
  // After step 2's record (the parameters copied first): 2 KB more tensor memory from here on, enough for step
  // 3's batch (576 bytes) and its first Linear's output (1 KB), not for the next activation.
  struct FailFromStep3 final : obs::Sink {
    torch::nn::Module* model = nullptr;
    std::vector<at::Tensor> after_step2;
    std::optional<obs::CpuTensorLimit> limit;
    void on_step(const obs::StepRecord& r) override {
      if (r.step != 2) return;
      after_step2 = params_of(*model);
      limit.emplace(obs::memory_stats(c10::Device(c10::kCPU)).current_bytes + 2048);
    }
  };
  auto fail = std::make_shared<FailFromStep3>();
  fail->model = m.get();
  t.add_sink(fail);
  try {
    t.fit(s);
    ADD_FAILURE() << "no allocation failed";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kResource) << e.message();
    EXPECT_NE(e.message().find("optimizer step 3 ran out of memory after its copy phase"), std::string::npos) << e.message();
    EXPECT_NE(e.message().find("CPU tensor memory limit of "), std::string::npos) << e.message();
    EXPECT_NE(e.message().find("tensor memory on cpu peaked at"), std::string::npos) << e.message();
    EXPECT_NE(e.hint().find("reduce data.batch_size"), std::string::npos);
  }
  fail->limit.reset();
  EXPECT_EQ(obs::cpu_tensor_limit(), 0);
  // Two steps trained; the third failed in its forward, before it changed anything.
  ASSERT_FALSE(fail->after_step2.empty());
  const auto now = params_of(*m);
  for (std::size_t i = 0; i < now.size(); ++i) EXPECT_TRUE(now[i].equal(fail->after_step2[i])) << "parameter " << i;
}

// Out-of-memory recovery (TrainerOptions::oom_recovery). A one-layer MLP 4096 wide, so that a step's activations
// are most of its memory; with dropout, so that the retried step must draw the masks the failed attempt drew.
std::shared_ptr<MlpImpl> make_wide_mlp() {
  torch::manual_seed(21);
  models::MlpOptions o;
  o.in_features = 8;
  o.hidden = {4096};
  o.out_features = 1;
  o.dropout = 0.1;
  return std::make_shared<MlpImpl>(o);
}

// A CPU tensor memory limit between what a step of 32 samples and one of 64 samples needs: every step of 64 fails
// in its forward. The run recovers in its first step and ends with the weights, bitwise, of a run planned with
// batches of 32 and twice the accumulation; the step count, samples and records are the same too.
TEST(Trainer, OutOfMemoryHalvesTheMicroBatchAndEqualsARunPlannedWithIt) {
  ASSERT_TRUE(obs::install_cpu_tracking());
  const auto data = dataset(512);
  TrainerOptions o = sgd_options();
  o.max_steps = 5;
  auto planned_model = make_wide_mlp();
  TrainerOptions planned_options = o;
  planned_options.accumulation_steps = 2;
  Trainer planned(planned_model, regression(), planned_options);
  auto planned_source = source(data, 32);
  const FitResult planned_result = planned.fit(planned_source);
  EXPECT_EQ(planned_result.oom_recoveries, 0);

  auto m = make_wide_mlp();
  Trainer t(m, regression(), o);
  auto recorder = std::make_shared<KeepingSink>();
  t.add_sink(recorder);
  // The peak tensor memory of a step above what the trainer holds, at 64 and 32 samples.
  auto probe = source(data, 64);
  probe.start_epoch(0);
  const data::Batch b64 = *probe.next();
  const std::int64_t p64 = t.measure_step_memory(b64).value();
  const std::int64_t p32 = t.measure_step_memory(b64.slice(0, 32)).value();
  ASSERT_LT(p32, 0.6 * p64) << "activations should dominate a step's memory";
  auto s = source(data, 64);
  FitResult result;
  {
    obs::CpuTensorLimit limit(obs::memory_stats(c10::Device(c10::kCPU)).current_bytes + (p32 + p64) / 2);
    result = t.fit(s);
  }
  EXPECT_EQ(result.oom_recoveries, 1);
  EXPECT_EQ(result.micro_split, 2);
  EXPECT_EQ(t.micro_split(), 2);
  EXPECT_EQ(result.steps, planned_result.steps);
  EXPECT_EQ(result.samples, planned_result.samples);
  EXPECT_EQ(result.final_loss, planned_result.final_loss);
  const auto got = params_of(*m), want = params_of(*planned_model);
  for (std::size_t i = 0; i < got.size(); ++i) EXPECT_TRUE(got[i].equal(want[i])) << "parameter " << i;
  bool noted = false;
  for (const auto& text : recorder->messages) {
    noted = noted || (text.find("optimizer step 1 ran out of memory in its") != std::string::npos &&
                      text.find("phase with micro-batches of 64 samples") != std::string::npos &&
                      text.find("2 micro-batches of 32 samples (2 per optimizer step)") != std::string::npos);
  }
  EXPECT_TRUE(noted) << ::testing::PrintToString(recorder->messages);
  // The split is trainer state: a resumed run goes on with it.
  const StateDict state = t.state_dict();
  EXPECT_EQ(get_int(state, "counters.micro_split"), 2);
  Trainer resumed(make_wide_mlp(), regression(), o);
  resumed.load_state_dict(state);
  EXPECT_EQ(resumed.micro_split(), 2);
}

// A micro-batch of one sample that still does not fit stops the run as before (a resource error), saying so; the
// weights are those before the step.
TEST(Trainer, OutOfMemoryAtOneSampleStopsWithTheReport) {
  ASSERT_TRUE(obs::install_cpu_tracking());
  const auto data = dataset(64);
  auto m = make_wide_mlp();
  const auto before = params_of(*m);
  TrainerOptions o = sgd_options();
  o.max_steps = 2;
  Trainer t(m, regression(), o);
  auto s = source(data, 16);
  try {
    // 12 KB more: the batch (576 bytes) and the step's RNG snapshot fit, the first Linear's output for one sample
    // (16 KB) does not.
    obs::CpuTensorLimit limit(obs::memory_stats(c10::Device(c10::kCPU)).current_bytes + 12 * 1024);
    t.fit(s);
    ADD_FAILURE() << "no allocation failed";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kResource) << e.message();
    EXPECT_NE(e.message().find("optimizer step 1 ran out of memory"), std::string::npos) << e.message();
    // 16 -> 8 -> 4 -> 2 -> 1
    EXPECT_NE(e.message().find("a micro-batch of 1 sample ran out of memory after 4 out-of-memory recoveries"), std::string::npos)
        << e.message();
  }
  EXPECT_EQ(t.micro_split(), 16);
  const auto now = params_of(*m);
  for (std::size_t i = 0; i < now.size(); ++i) EXPECT_TRUE(now[i].equal(before[i])) << "parameter " << i;
}

// A task that runs out of memory (c10::OutOfMemoryError, as a full GPU does) on micro-batches above `limit` samples.
class OutOfMemoryAbove final : public Task {
 public:
  OutOfMemoryAbove(std::shared_ptr<Task> inner, std::int64_t limit) : inner_(std::move(inner)), limit_(limit) {}
  StepOutput step(torch::nn::Module& model, const data::Batch& batch) override {
    if (batch.size > limit_) C10_THROW_ERROR(OutOfMemoryError, "test: out of memory above " + std::to_string(limit_) + " samples");
    return inner_->step(model, batch);
  }

 private:
  std::shared_ptr<Task> inner_;
  std::int64_t limit_;
};

// Two ranks (threads, Gloo): rank 1 runs out of memory above 16 samples, rank 0 never. Both put back the step and
// retry with half the micro-batch, twice (64 -> 32 -> 16), and end bitwise equal to two ranks planned with
// micro-batches of 16 and four times the accumulation; a micro-batch of 1 that still fails on rank 1 stops both,
// each naming why.
TEST(Trainer, OutOfMemoryWithSeveralRanksRetriesOnEveryRank) {
  const auto data = dataset(256);
  auto train_ranks = [&](std::int64_t batch, std::int64_t accumulation, std::int64_t oom_above_on_rank1, std::vector<std::vector<at::Tensor>>* params,
                         std::vector<FitResult>* results) {
    params->assign(2, {});
    results->assign(2, {});
    dist::run_ranks(2, {}, [&](dist::Ddp& ddp, int rank) {
      std::shared_ptr<MlpImpl> m;
      {
        static std::mutex init;  // the ranks are threads sharing the default generator
        const std::lock_guard lock(init);
        m = make_mlp(5);
      }
      TrainerOptions o = sgd_options();
      o.max_steps = 3;
      o.accumulation_steps = accumulation;
      o.oom_recovery_with_ranks = true;  // train.oom_recovery: true
      o.strategy = std::shared_ptr<dist::Strategy>(&ddp, [](dist::Strategy*) {});
      std::shared_ptr<Task> task = regression();
      if (rank == 1 && oom_above_on_rank1 > 0) task = std::make_shared<OutOfMemoryAbove>(task, oom_above_on_rank1);
      Trainer t(m, task, o);
      auto s = source(data, batch);
      (*results)[static_cast<std::size_t>(rank)] = t.fit(s);
      (*params)[static_cast<std::size_t>(rank)] = params_of(*m);
    });
  };
  std::vector<std::vector<at::Tensor>> planned, recovered;
  std::vector<FitResult> planned_results, recovered_results;
  train_ranks(16, 4, 0, &planned, &planned_results);
  train_ranks(64, 1, 16, &recovered, &recovered_results);
  for (int r = 0; r < 2; ++r) {
    EXPECT_EQ(recovered_results[r].oom_recoveries, 2) << "rank " << r << ": 64 -> 32 -> 16";
    EXPECT_EQ(recovered_results[r].micro_split, 4) << "rank " << r;
    EXPECT_EQ(recovered_results[r].steps, planned_results[r].steps);
    for (std::size_t i = 0; i < planned[r].size(); ++i) EXPECT_TRUE(recovered[r][i].equal(planned[r][i])) << "rank " << r << " parameter " << i;
  }
  // Rank 1 cannot go below one sample: both ranks stop, rank 1 with the out-of-memory report, rank 0 saying why.
  std::vector<std::string> errors(2);
  dist::run_ranks(2, {}, [&](dist::Ddp& ddp, int rank) {
    TrainerOptions o = sgd_options();
    o.max_steps = 2;
    o.oom_recovery_with_ranks = true;
    o.strategy = std::shared_ptr<dist::Strategy>(&ddp, [](dist::Strategy*) {});
    std::shared_ptr<Task> task = rank == 1 ? std::make_shared<OutOfMemoryAbove>(regression(), 0) : regression();
    Trainer t(make_mlp(5), task, o);
    auto s = source(data, 8);
    try {
      t.fit(s);
    } catch (const Error& e) {
      errors[static_cast<std::size_t>(rank)] = e.message();
    }
  });
  EXPECT_NE(errors[1].find("a micro-batch of 1 sample ran out of memory after 3 out-of-memory recoveries"), std::string::npos) << errors[1];
  EXPECT_NE(errors[0].find("another rank ran out of memory with a micro-batch it cannot make smaller"), std::string::npos) << errors[0];
}

// On its own: a micro-batch above the task's limit runs out of memory in its forward; the step runs again with half
// the micro-batch, says so, and its update is bitwise the eager step's planned with that split.
TEST(RecoveringStep, AnOutOfMemoryMicroBatchRunsAgainHalved) {
  const auto data = dataset(64);
  auto run = [&](std::int64_t limit, std::int64_t parts, MicroSplit& split, std::vector<std::string>& messages) {
    auto model = make_mlp(7);
    std::shared_ptr<Task> task = std::make_shared<OutOfMemoryAbove>(regression(), limit);
    const TrainerOptions options = sgd_options();
    auto policy = precision::make_precision("fp32", c10::Device(c10::kCPU));
    dist::SingleDevice single;
    Optimizer optimizer(bellows::named_parameters(*model), options.optimizer);
    const std::vector<at::Tensor> params = optimizer.parameters();
    obs::PhaseClock clock{c10::Device(c10::kCPU)};
    split.parts = parts;
    const StepParts p{*model, *task, *policy, optimizer, single, options, params, clock, split,
                      [&](const std::string& text) { messages.push_back(text); }};
    RecoveringStep step(p, std::make_unique<EagerStep>(p), /*together=*/false);
    auto s = source(data, 64);
    s.start_epoch(0);
    StepBatches loaded(s, 1, 1, clock);
    const StepResult r = step.run(loaded);
    EXPECT_EQ(r.samples, 64);
    return std::make_pair(r.repeated, params_of(*model));
  };
  MicroSplit recovered, planned;
  std::vector<std::string> recovered_messages, planned_messages;
  const auto [repeated, got] = run(32, 1, recovered, recovered_messages);
  const auto [not_repeated, want] = run(1000, 2, planned, planned_messages);
  EXPECT_TRUE(repeated);
  EXPECT_FALSE(not_repeated);
  EXPECT_EQ(recovered.parts, 2);
  EXPECT_EQ(recovered.recoveries, 1);
  ASSERT_EQ(recovered_messages.size(), 1u);
  EXPECT_NE(recovered_messages[0].find("optimizer step 1 ran out of memory in its forward phase with micro-batches of 64 samples"),
            std::string::npos) << recovered_messages[0];
  for (std::size_t i = 0; i < got.size(); ++i) EXPECT_TRUE(got[i].equal(want[i])) << "parameter " << i;
}

}  // namespace recovering_step_test
}  // namespace bellows::train
