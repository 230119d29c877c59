// The trainer of a run, from its config: the options of train::Trainer (train, optim, schedule, ema, scaler
// keys, and the plan's device, precision, channels_last and pinning), and the process-wide dropout masks setting.
// `bellows train` and the bare-loop benchmark (bench/bare_loop.cpp) read them the same way.
#pragma once

#include "bellows/config/config.h"    // defines: Config
#include "bellows/models/dropout.h"   // defines: DropoutMasks
#include "bellows/plan/plan.h"        // defines: Plan
#include "bellows/train/trainer.h"    // defines: TrainerOptions

namespace bellows::app {

// kConfig errors name the key: optim.betas not two values, ema.eval without ema.enabled.
train::TrainerOptions trainer_options(const config::Config& config, const plan::Plan& plan);

// The dropout_masks key: parallel or torch.
models::DropoutMasks dropout_masks_setting(const config::Config& config);

}  // namespace bellows::app
