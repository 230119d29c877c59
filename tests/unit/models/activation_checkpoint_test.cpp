// Activation checkpointing: the same gradients with and without it (dropout on), parameter gradients when the
// block's inputs need none, the RNG stream left as without it, and the block selection errors.
#include "bellows/models/activation_checkpoint.h"

#include <ATen/ATen.h>
#include <gtest/gtest.h>
#include <torch/nn/modules/container/sequential.h>
#include <torch/nn/modules/dropout.h>
#include <torch/nn/modules/linear.h>
#include <torch/nn/modules/activation.h>
#include <torch/torch.h>

#include "test_util.h"

namespace bellows::models {
namespace {

using test_support::error_from;

// Two blocks of Linear-GELU-Dropout, checkpointable by name.
class TwoBlocks : public torch::nn::Module, public Checkpointable {
 public:
  TwoBlocks() {
    for (int i = 0; i < 2; ++i) {
      blocks_.push_back(register_module("blocks" + std::to_string(i),
                                        torch::nn::Sequential(torch::nn::Linear(8, 8), torch::nn::GELU(), torch::nn::Dropout(0.3))));
    }
  }
  std::vector<std::string> checkpoint_blocks() const override { return {"blocks0", "blocks1"}; }
  at::Tensor forward(at::Tensor x) {
    for (int i = 0; i < 2; ++i) {
      auto& block = blocks_[i];
      x = run_block("blocks" + std::to_string(i), *block, [&block](const at::Tensor& in) { return block->forward(in); }, x);
    }
    return x;
  }
  std::vector<torch::nn::Sequential> blocks_;
};

struct Grads {
  std::vector<at::Tensor> params;
  at::Tensor input;
  at::Tensor rng_after;  // the CPU generator's state after forward + backward
};

Grads run_once(const std::vector<std::string>& checkpointed, bool input_requires_grad) {
  torch::manual_seed(7);
  TwoBlocks model;
  model.set_checkpointed(checkpointed);
  model.train();
  at::Tensor x = at::randn({16, 8}).requires_grad_(input_requires_grad);
  torch::manual_seed(11);  // the same dropout draws in both runs
  at::Tensor y = model.forward(x);
  (y.square().sum() + y.sum()).backward();
  Grads g;
  for (const auto& p : model.parameters()) g.params.push_back(p.grad().clone());
  if (input_requires_grad) g.input = x.grad().clone();
  g.rng_after = at::detail::getDefaultCPUGenerator().get_state();
  return g;
}

TEST(ActivationCheckpoint, GradientsAreBitwiseTheSameWithDropoutOn) {
  for (const bool input_grad : {true, false}) {
    const Grads plain = run_once({}, input_grad);
    for (const auto& chosen : std::vector<std::vector<std::string>>{{"blocks0"}, {"blocks1"}, {"blocks0", "blocks1"}}) {
      const Grads ck = run_once(chosen, input_grad);
      ASSERT_EQ(plain.params.size(), ck.params.size());
      for (std::size_t i = 0; i < plain.params.size(); ++i) {
        EXPECT_TRUE(at::equal(plain.params[i], ck.params[i])) << "parameter " << i << ", blocks " << chosen.size();
        EXPECT_GT(plain.params[i].abs().sum().item<double>(), 0) << "a gradient of zero would make the comparison empty";
      }
      if (input_grad) EXPECT_TRUE(at::equal(plain.input, ck.input));
      // The random stream continues as if no recomputation had happened.
      EXPECT_TRUE(at::equal(plain.rng_after, ck.rng_after));
    }
  }
}

TEST(ActivationCheckpoint, DropoutMasksDifferWithoutTheRngRestore) {
  // Guards the test above: two forwards of the block from different RNG states give different outputs, so
  // equal gradients do prove that the recomputation replayed the forward's dropout mask.
  torch::manual_seed(1);
  TwoBlocks model;
  model.train();
  const at::Tensor x = at::randn({16, 8});
  torch::manual_seed(2);
  const at::Tensor a = model.forward(x);
  const at::Tensor b = model.forward(x);
  EXPECT_FALSE(at::equal(a, b));
}

TEST(ActivationCheckpoint, RecomputesInBackwardAndSaysSo) {
  int calls = 0, recomputed_calls = 0;
  const at::Tensor w = at::randn({4, 4}).requires_grad_();
  BlockFunction fn = [&](const std::vector<at::Tensor>& in) {
    ++calls;
    if (recomputing()) ++recomputed_calls;
    return std::vector<at::Tensor>{at::tanh(at::matmul(in[0], w)), in[0] * 2};
  };
  const at::Tensor x = at::randn({3, 4}).requires_grad_();
  auto out = checkpoint(fn, {x}, {w});
  EXPECT_EQ(calls, 1);
  EXPECT_EQ(recomputed_calls, 0);
  EXPECT_FALSE(recomputing());
  (out[0].sum() + out[1].sum()).backward();
  EXPECT_EQ(calls, 2);
  EXPECT_EQ(recomputed_calls, 1);
  // Against the plain computation.
  const at::Tensor x2 = x.detach().clone().requires_grad_();
  const at::Tensor w2 = w.detach().clone().requires_grad_();
  (at::tanh(at::matmul(x2, w2)).sum() + (x2 * 2).sum()).backward();
  EXPECT_TRUE(at::allclose(x.grad(), x2.grad(), 0, 0));
  EXPECT_TRUE(at::allclose(w.grad(), w2.grad(), 0, 0));
}

TEST(ActivationCheckpoint, RunsPlainlyWithoutGradients) {
  int calls = 0;
  BlockFunction fn = [&](const std::vector<at::Tensor>& in) {
    ++calls;
    return std::vector<at::Tensor>{in[0] + 1};
  };
  const at::Tensor w = at::randn({2}).requires_grad_();
  {
    at::NoGradGuard no_grad;
    EXPECT_FALSE(checkpoint(fn, {at::ones({2})}, {w})[0].requires_grad());
  }
  // Nothing needs a gradient: no autograd node.
  EXPECT_FALSE(checkpoint(fn, {at::ones({2})}, {})[0].requires_grad());
  EXPECT_EQ(calls, 2);
}

TEST(ActivationCheckpoint, EvalModeAndUnselectedBlocksRunPlainly) {
  torch::manual_seed(3);
  TwoBlocks model;
  model.set_checkpointed({"blocks0"});
  model.eval();
  const at::Tensor y = model.forward(at::randn({2, 8}));
  // Plain autograd history (a Linear/GELU chain), not the checkpoint node.
  ASSERT_TRUE(y.grad_fn());
  EXPECT_EQ(y.grad_fn()->name().find("CheckpointFunction"), std::string::npos) << y.grad_fn()->name();
  model.train();
  torch::manual_seed(3);
  TwoBlocks only_first;
  only_first.set_checkpointed({"blocks1"});
  only_first.train();
  const at::Tensor z = only_first.forward(at::randn({2, 8}));
  EXPECT_NE(z.grad_fn()->name().find("CheckpointFunction"), std::string::npos) << z.grad_fn()->name();
}

TEST(ActivationCheckpoint, PatternsSelectBlocksAndUnknownOnesAreNamed) {
  const std::vector<std::string> blocks = {"layers.0", "layers.1", "layers.10", "head"};
  EXPECT_EQ(select_blocks({"layers.*"}, blocks), (std::vector<std::string>{"layers.0", "layers.1", "layers.10"}));
  EXPECT_EQ(select_blocks({"layers.1?", "head"}, blocks), (std::vector<std::string>{"layers.10", "head"}));
  const Error e = error_from([&] { select_blocks({"encoder.*"}, blocks); });
  EXPECT_EQ(e.kind(), ErrorKind::kConfig);
  EXPECT_NE(e.message().find("'encoder.*' matches no block"), std::string::npos) << e.message();
  EXPECT_NE(e.hint().find("layers.0, layers.1, layers.10, head"), std::string::npos) << e.hint();

  TwoBlocks model;
  EXPECT_EQ(apply_checkpointing(model, {"blocks1"}), (std::vector<std::string>{"blocks1"}));
  EXPECT_EQ(model.checkpointed(), (std::set<std::string>{"blocks1"}));
  EXPECT_TRUE(apply_checkpointing(model, {}).empty());
  EXPECT_TRUE(model.checkpointed().empty());
  EXPECT_EQ(error_from([&] { model.set_checkpointed({"blocks7"}); }).kind(), ErrorKind::kConfig);

  torch::nn::Linear plain(2, 2);
  const Error not_ck = error_from([&] { apply_checkpointing(*plain, {"*"}); });
  EXPECT_EQ(not_ck.kind(), ErrorKind::kConfig);
  EXPECT_NE(not_ck.message().find("has no checkpointable blocks"), std::string::npos) << not_ck.message();
  EXPECT_TRUE(apply_checkpointing(*plain, {}).empty());
}

// Hooks (util/block_hooks.h, what fsdp moves weights with) see each block's forward, then, in backward, each block
// before any of its own backward runs (the first block's gradient is not there yet when its hook is called), under the
// model's prefix; without grad mode no backward hook is due.
TEST(ActivationCheckpoint, BlockHooksSeeEveryForwardAndEveryBackwardBeforeTheBlocksOwn) {
  struct Recorder : BlockHooks {
    std::vector<std::string> calls;
    const at::Tensor* watched = nullptr;  // blocks0's weight: its gradient must not exist at before_backward(blocks0)
    void before_forward(const std::string& b) override { calls.push_back("F " + b); }
    void after_forward(const std::string& b, bool backward_follows) override {
      calls.push_back(std::string(backward_follows ? "f " : "f- ") + b);
    }
    void before_backward(const std::string& b) override {
      calls.push_back("B " + b + (watched->grad().defined() ? " (grad already)" : ""));
    }
  };
  for (const bool checkpointed : {false, true}) {
    torch::manual_seed(5);
    TwoBlocks model;
    if (checkpointed) model.set_checkpointed({"blocks0", "blocks1"});
    auto hooks = std::make_shared<Recorder>();
    const at::Tensor weight = model.blocks_[0]->parameters()[0];
    hooks->watched = &weight;
    model.set_block_hooks(hooks, "net.");
    model.forward(at::randn({2, 8})).sum().backward();
    EXPECT_EQ(hooks->calls, (std::vector<std::string>{"F net.blocks0", "f net.blocks0", "F net.blocks1", "f net.blocks1", "B net.blocks1",
                                                      "B net.blocks0"}))
        << "checkpointed " << checkpointed;
    hooks->calls.clear();
    {
      at::NoGradGuard no_grad;
      model.forward(at::randn({2, 8}));
    }
    EXPECT_EQ(hooks->calls, (std::vector<std::string>{"F net.blocks0", "f- net.blocks0", "F net.blocks1", "f- net.blocks1"}));
  }
}

}  // namespace
}  // namespace bellows::models
