// Calls around a model's named blocks, for a strategy that keeps a block's parameters elsewhere between uses
// (dist/fsdp.h). A model that runs its blocks through models::Checkpointable::run_block calls before_forward and
// after_forward around each block's forward, and before_backward from an autograd node on the block's outputs,
// before any of the block's backward (a checkpointed block's recomputation included) runs. The names are the
// blocks' module names in the whole model ("encoder.layers.0"). Here, at the bottom, so that models/ calls what
// dist/ implements without either knowing the other.
#pragma once

#include <string>

namespace bellows {

class BlockHooks {
 public:
  virtual ~BlockHooks() = default;
  virtual void before_forward(const std::string& block) = 0;
  // `backward_follows`: the block ran under grad mode with outputs that need gradients, so before_backward comes.
  virtual void after_forward(const std::string& block, bool backward_follows) = 0;
  virtual void before_backward(const std::string& block) = 0;
};

}  // namespace bellows
