// The buffers and RNG states of before a step; see step_undo.h.
#include "bellows/train/step_undo.h"

#include <ATen/ATen.h>
#include <torch/csrc/autograd/grad_mode.h>

#include "bellows/train/checkpointing.h"  // defines: rng_state, load_rng_state

namespace bellows::train {

StepUndo::StepUndo(torch::nn::Module& model) {
  for (auto& b : model.buffers()) {
    if (b.defined() && b.numel() > 0) live_.push_back(b);
  }
}

void StepUndo::save() {
  rng_ = rng_state();
  torch::NoGradGuard no_grad;
  if (saved_.empty()) {
    for (const auto& b : live_) saved_.push_back(b.clone());
  } else if (!live_.empty()) {
    at::_foreach_copy_(saved_, live_);
  }
}

void StepUndo::restore() const {
  {
    torch::NoGradGuard no_grad;
    if (!live_.empty()) at::_foreach_copy_(live_, saved_);
  }
  load_rng_state(rng_);
}

}  // namespace bellows::train
