// The online trainer's parts (app::OnlineTrainer::Parts: config, plan, model, strategy, trainer and the latest
// records), shared by online.cpp (the program's side) and online_collective.cpp (the collective calls). Private to app/.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>

#include "bellows/app/online.h"         // defines: OnlineTrainer
#include "bellows/config/config.h"      // defines: Config
#include "bellows/dist/strategy.h"      // defines: Strategy
#include "bellows/models/registry.h"    // defines: BuiltModel
#include "bellows/obs/sink.h"           // defines: Sink, StepRecord, EvalRecord
#include "bellows/plan/plan.h"          // defines: Plan
#include "bellows/train/trainer.h"      // defines: Trainer

namespace bellows::app {

// The last step record, for metrics() from any thread.
class OnlineLatestRecord final : public obs::Sink {
 public:
  void on_step(const obs::StepRecord& r) override {
    std::lock_guard lock(mutex_);
    last_ = r;
  }
  void on_eval(const obs::EvalRecord& r) override {
    std::lock_guard lock(mutex_);
    eval_ = r;
  }
  std::optional<obs::StepRecord> last() const {
    std::lock_guard lock(mutex_);
    return last_;
  }
  std::optional<obs::EvalRecord> last_eval() const {
    std::lock_guard lock(mutex_);
    return eval_;
  }

 private:
  mutable std::mutex mutex_;
  std::optional<obs::StepRecord> last_;
  std::optional<obs::EvalRecord> eval_;
};

struct OnlineTrainer::Parts {
  config::Config config;
  plan::Plan plan;
  models::BuiltModel model;
  std::shared_ptr<dist::Strategy> strategy;  // the job's ranks (one process: SingleDevice)
  std::unique_ptr<train::Trainer> trainer;
  std::shared_ptr<OnlineLatestRecord> latest = std::make_shared<OnlineLatestRecord>();
  std::atomic<std::int64_t> step{0};  // the trainer's step when no session runs (the record's while one does)
};

}  // namespace bellows::app
