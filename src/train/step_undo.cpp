// The buffers and RNG states of before a step; see step_undo.h.
#include "bellows/train/step_undo.h"

#include <ATen/ATen.h>
#include <torch/csrc/autograd/grad_mode.h>

#include <map>
#include <string>
#include <utility>

#include "bellows/train/checkpointing.h"  // defines: rng_state, load_rng_state

namespace bellows::train {

StepUndo::StepUndo(torch::nn::Module& model) {
  std::map<std::pair<at::ScalarType, std::string>, std::size_t> group_of;
  for (auto& b : model.buffers()) {
    if (!b.defined() || b.numel() == 0) continue;
    const auto [it, added] = group_of.emplace(std::make_pair(b.scalar_type(), b.device().str()), groups_.size());
    if (added) groups_.emplace_back();
    groups_[it->second].live.push_back(b);
  }
}

void StepUndo::save() {
  rng_ = rng_state();
  torch::NoGradGuard no_grad;
  for (Group& g : groups_) {
    if (g.saved.empty()) {
      for (const auto& b : g.live) g.saved.push_back(b.clone());
    } else {
      at::_foreach_copy_(g.saved, g.live);
    }
  }
}

void StepUndo::restore() const {
  {
    torch::NoGradGuard no_grad;
    for (const Group& g : groups_) at::_foreach_copy_(g.live, g.saved);
  }
  load_rng_state(rng_);
}

}  // namespace bellows::train
