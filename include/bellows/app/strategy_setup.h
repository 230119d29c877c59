// The run's Strategy (dist/) from the config's dist block and the launcher's environment: one process trains
// alone (dist::SingleDevice), several started by `bellows launch`, torchrun, srun or mpirun train data parallel
// (dist::Ddp) after meeting at the rendezvous. Also the plan row that says which, and why.
#pragma once

#include <memory>
#include <string>

#include "bellows/config/config.h"      // defines: Config
#include "bellows/dist/environment.h"   // defines: ProcessInfo
#include "bellows/dist/strategy.h"      // defines: Strategy
#include "bellows/plan/plan.h"          // defines: Plan, PlanEntry

namespace bellows::app {

// This process in its job (dist::detect_process), checked against dist.strategy: `single` where the
// environment names several processes is a kConfig error naming both.
dist::ProcessInfo process_info(const config::Config& config);

struct StrategySetup {
  std::shared_ptr<dist::Strategy> strategy;
  plan::PlanEntry entry;  // "strategy": single | ddp, with world size, backend and the variables that said so
  // dist.strategy: auto for several processes: they met as ddp, and the run decides by memory once the model is built
  // (plan/strategy.h; app::assemble_run).
  bool by_memory = false;
};

// Joins the job for ddp (the rendezvous: dist.timeout_s bounds it; ranks whose configs differ stop there).
StrategySetup make_strategy(const config::Config& config, const dist::ProcessInfo& process, const plan::Plan& plan);

// Rank 0's `text` on every rank (e.g. the run directory rank 0 chose).
std::string broadcast_text(dist::Strategy& strategy, const std::string& text);

}  // namespace bellows::app
