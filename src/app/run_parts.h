// Pieces of app::run() that online training (app/online.h) assembles too. Private to app/.
#pragma once

#include <filesystem>
#include <string>
#include <utility>
#include <vector>

#include "bellows/config/config.h"          // defines: Config
#include "bellows/hw/hardware_info.h"       // defines: HardwareInfo
#include "bellows/obs/profile.h"             // defines: ProfileOptions
#include "bellows/plan/plan.h"              // defines: Plan
#include "bellows/train/checkpointing.h"    // defines: CheckpointOptions
#include "bellows/train/trainer.h"          // defines: TrainerOptions

namespace bellows::app {

// A fresh directory for the run: <output_dir>/<name>, or <name>-2, -3, ... when that one holds a run.
// A resumed run (resume: set) continues in <output_dir>/<name>. kResource error when it cannot be made.
std::filesystem::path make_run_dir(const config::Config& config);

// The checkpoint.* keys with checkpoints in <dir>/checkpoints (dir empty when checkpoint.enabled is false).
train::CheckpointOptions checkpoint_options(const config::Config& config, const std::filesystem::path& dir);

// The profile.* keys (profile.window "N-M": steps N to M, from 1) with the trace in <dir>/trace.json.
obs::ProfileOptions profile_options(const config::Config& config, const std::filesystem::path& dir);

// log.flops: FLOP counting on, and the matmul peak of the plan's precision and device from the cached measured
// peaks (hw/peaks.h; measured now when none are cached and `may_measure`), into the trainer options; a line for
// the run's messages when peaks were measured or MFU cannot be reported.
void set_flop_options(const config::Config& config, const hw::HardwareInfo& hw, const plan::Plan& plan, bool may_measure,
                      train::TrainerOptions& options, std::vector<std::string>& notes);

// The console header: the machine, the GPUs and every plan row with its reason.
std::vector<std::pair<std::string, std::string>> header_rows(const hw::HardwareInfo& hw, const plan::Plan& plan);

}  // namespace bellows::app
