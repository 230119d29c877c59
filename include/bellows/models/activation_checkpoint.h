// Activation checkpointing (seeds 003 and 004; LibTorch has none, PyTorch #52744): a block runs without
// keeping its intermediate activations, and backward recomputes them from the saved inputs. The RNG states
// (CPU and the inputs' CUDA devices) and the autocast state are recorded at forward time and restored for
// the recomputation, so dropout draws the same mask and mixed precision casts the same way; gradients are
// the same as without checkpointing. Memory falls from every activation inside the block to its inputs.
#pragma once

#include <ATen/core/Tensor.h>
#include <torch/nn/module.h>

#include <functional>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "bellows/util/block_hooks.h"  // defines: BlockHooks

namespace bellows::models {

using BlockFunction = std::function<std::vector<at::Tensor>(const std::vector<at::Tensor>&)>;

// Runs fn(inputs) under no-grad and returns its outputs attached to one custom autograd node; in backward,
// fn runs again with gradients on and its gradients flow to `inputs` and to `params` (the tensors fn reads
// besides its inputs: the block's parameters). fn must be a pure function of its inputs, its parameters and
// the RNG (no state changes that a second run would repeat, e.g. BatchNorm running statistics are updated
// twice). Without grad mode, or when nothing needs a gradient, fn simply runs.
// fn is kept and called again during backward, after the forward's scope has ended: it must capture by value
// (tensors, module holders) or refer only to objects that outlive the backward (the model), never to locals.
std::vector<at::Tensor> checkpoint(const BlockFunction& fn, const std::vector<at::Tensor>& inputs,
                                   const std::vector<at::Tensor>& params);

// True on the thread that is recomputing a checkpointed block in backward. Code with side effects that must
// happen once per forward (BatchNorm's running statistics) skips them while this is true.
bool recomputing();

// Models with named, repeated blocks implement this, so that `checkpointing: [patterns]` selects blocks by
// name, and run each block through run_block().
class Checkpointable {
 public:
  virtual ~Checkpointable() = default;
  // The blocks that can be checkpointed, by their module names ("layers.0", "layer2.1", ...).
  virtual std::vector<std::string> checkpoint_blocks() const = 0;

  // Selects blocks by name (names not in checkpoint_blocks() are a kConfig error).
  void set_checkpointed(const std::vector<std::string>& names);
  const std::set<std::string>& checkpointed() const { return checkpointed_; }

  // Runs fn on the inputs, through checkpoint() with `block`'s parameters when `name` is selected and the
  // block is training under grad mode; otherwise directly.
  std::vector<at::Tensor> run_block(const std::string& name, torch::nn::Module& block, const BlockFunction& fn,
                                    const std::vector<at::Tensor>& inputs) const;
  at::Tensor run_block(const std::string& name, torch::nn::Module& block,
                       const std::function<at::Tensor(const at::Tensor&)>& fn, const at::Tensor& x) const;

  // Calls `hooks` around every block run_block runs (util/block_hooks.h), naming it `prefix` + its name here: the
  // block's name in the whole model. nullptr removes them. A model whose blocks are an inner Checkpointable's
  // (TransformerModel's encoder) overrides this to hand the hooks down with the inner model's prefix.
  virtual void set_block_hooks(std::shared_ptr<BlockHooks> hooks, const std::string& prefix = "");

 protected:
  // checkpoint_blocks()[i], listed once: a forward names its blocks without formatting strings every step.
  const std::string& block_name(std::size_t i) const;

 private:
  std::vector<at::Tensor> run_hooked(const std::string& name, torch::nn::Module& block, const BlockFunction& fn,
                                     const std::vector<at::Tensor>& inputs) const;

  std::set<std::string> checkpointed_;
  mutable std::vector<std::string> block_names_;
  std::shared_ptr<BlockHooks> hooks_;
  std::string hook_prefix_;
};

// The block names that the glob patterns (fnmatch: `*` and `?` also match dots) select, in block order. A
// pattern that selects nothing is a kConfig error naming `key` (the config key the patterns come from) and listing the
// blocks there are. util's select_names (util/name_patterns.h), which dist/ uses for fsdp's units too.
std::vector<std::string> select_blocks(const std::vector<std::string>& patterns, const std::vector<std::string>& blocks,
                                       const std::string& key = "checkpointing");

// Applies `checkpointing:` patterns to a model; a model that is not Checkpointable is a kConfig error when
// patterns are given. Returns the blocks selected.
std::vector<std::string> apply_checkpointing(torch::nn::Module& model, const std::vector<std::string>& patterns);

}  // namespace bellows::models
