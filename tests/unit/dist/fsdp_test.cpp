// fsdp (dist/fsdp.h) over Gloo with the ranks as threads: a model of named blocks (models::Checkpointable) trains to
// ddp's weights (bitwise on 2 ranks, with checkpointed blocks or not; to rounding on 4), while between steps a rank
// holds the weights of its own block tensors only (and of the tensors outside blocks), each gradient on one rank, and
// gather_parameters() gives every rank the whole model.
#include "bellows/dist/fsdp.h"

#include <ATen/ATen.h>
#include <gtest/gtest.h>
#include <torch/nn/modules/container/modulelist.h>

#include "bellows/models/activation_checkpoint.h"
#include "bellows/train/optimizer.h"
#include "bellows/util/error.h"
#include "bellows/util/module_tensors.h"
#include "dist/ranks.h"

namespace bellows::dist {
namespace {

// 4 -> hidden, three blocks hidden -> hidden (tanh), -> 1; the blocks run through run_block as "blocks.0" ...
struct BlockNet : torch::nn::Module, models::Checkpointable {
  torch::nn::Linear in{nullptr}, head{nullptr};
  std::vector<torch::nn::Linear> blocks;
  BlockNet(std::uint64_t seed, std::int64_t hidden) {
    const std::lock_guard lock(init_mutex());
    torch::manual_seed(seed);
    in = register_module("in", torch::nn::Linear(4, hidden));
    torch::nn::ModuleList list;
    for (int i = 0; i < 3; ++i) {
      blocks.push_back(torch::nn::Linear(hidden, hidden));
      list->push_back(blocks.back());
    }
    register_module("blocks", list);
    head = register_module("head", torch::nn::Linear(hidden, 1));
  }
  std::vector<std::string> checkpoint_blocks() const override { return {"blocks.0", "blocks.1", "blocks.2"}; }
  at::Tensor forward(const at::Tensor& x) {
    at::Tensor h = in(x).tanh();
    for (std::size_t i = 0; i < blocks.size(); ++i) {
      torch::nn::Linear b = blocks[i];
      h = run_block(block_name(i), *b, [b](const at::Tensor& t) mutable { return b->forward(t).tanh(); }, h);
    }
    return head(h);
  }
};

struct FsdpRankResult {
  std::vector<at::Tensor> weights;
  std::int64_t held_between_steps = 0, held_after_gather = 0, grad_elements = 0, all_elements = 0;
};

// `steps` AdamW steps on rank-strided rows of one global batch, with the strategy S, as the trainer runs them.
template <typename S>
std::vector<FsdpRankResult> train_blocks(int world, int steps, bool checkpointed) {
  torch::manual_seed(0);
  const at::Tensor x = at::randn({steps, 8, 4}), y = at::randn({steps, 8, 1});
  std::vector<FsdpRankResult> results(static_cast<std::size_t>(world));
  run_strategy_ranks<S>(world, DdpOptions{}, [&](S& s, int r) {
    BlockNet net(r == 0 ? 1 : 50 + static_cast<std::uint64_t>(r), 16);
    if (checkpointed) net.set_checkpointed(net.checkpoint_blocks());
    train::OptimizerOptions o;
    o.lr = 1e-2;
    const NamedTensors trainable = train::trainable_parameters(bellows::named_parameters(net), o);
    std::vector<at::Tensor> params;
    for (const auto& [name, p] : trainable) params.push_back(p);
    if constexpr (std::is_same_v<S, Fsdp>) {  // what Fsdp::attach does from the model's blocks
      std::vector<std::vector<std::size_t>> units(3);
      for (std::size_t i = 0; i < trainable.size(); ++i) {
        const std::string& name = trainable[i].first;
        if (name.rfind("blocks.", 0) == 0) units[static_cast<std::size_t>(name[7] - '0')].push_back(i);
      }
      s.set_units(net.checkpoint_blocks(), units);
      net.set_block_hooks(s.block_hooks());
    }
    const std::vector<bool> mine = s.shard(params);
    NamedTensors owned;
    for (std::size_t i = 0; i < trainable.size(); ++i) {
      if (mine[i]) owned.push_back(trainable[i]);
    }
    train::Optimizer optimizer(owned, o);
    s.setup(net, params);
    FsdpRankResult& out = results[static_cast<std::size_t>(r)];
    const auto held = [&] {
      std::int64_t n = 0;
      for (const auto& p : params) n += p.storage().nbytes() > 0 ? p.numel() : 0;
      return n;
    };
    for (const auto& p : params) out.all_elements += p.numel();
    for (int step = 0; step < steps; ++step) {
      const at::Tensor xs = x[step].slice(0, r, 8, world), ys = y[step].slice(0, r, 8, world);
      s.backward((net.forward(xs) - ys).square().mean());
      s.finish_gradients();
      out.grad_elements = 0;
      for (const auto& p : params) out.grad_elements += p.grad().defined() ? p.grad().numel() : 0;
      optimizer.step();
      s.finish_update();
      train::clear_gradients(params);
      out.held_between_steps = held();
    }
    s.gather_parameters();
    out.held_after_gather = held();
    for (const auto& p : params) out.weights.push_back(p.detach().clone());
  });
  return results;
}

TEST(Fsdp, TwoRanksTrainBitwiseAsDdpHoldingTheirOwnBlockWeightsBetweenSteps) {
  const auto ddp = train_blocks<Ddp>(2, 4, false);
  for (const bool checkpointed : {false, true}) {
    const auto fsdp = train_blocks<Fsdp>(2, 4, checkpointed);
    std::int64_t grads = 0;
    for (int r = 0; r < 2; ++r) {
      const auto& f = fsdp[static_cast<std::size_t>(r)];
      ASSERT_EQ(f.weights.size(), ddp[0].weights.size());
      for (std::size_t i = 0; i < f.weights.size(); ++i) {
        EXPECT_TRUE(f.weights[i].equal(ddp[0].weights[i])) << "rank " << r << " tensor " << i << " checkpointed " << checkpointed;
      }
      // 16x16 + 16 per block, 3 blocks: 816 of 913 elements in blocks. Between steps a rank holds the 97 outside
      // blocks and its own block tensors: less than ddp's all, more than the tensors outside blocks.
      EXPECT_EQ(f.all_elements, 913);
      EXPECT_LT(f.held_between_steps, 913) << "rank " << r;
      EXPECT_GT(f.held_between_steps, 97) << "rank " << r;
      EXPECT_EQ(f.held_after_gather, 913) << "rank " << r;
      grads += f.grad_elements;
    }
    EXPECT_EQ(fsdp[0].held_between_steps + fsdp[1].held_between_steps, 913 + 97) << "each block tensor on exactly one rank";
    EXPECT_EQ(grads, 913) << "each gradient on exactly one rank (zero2's reduce to the owner)";
  }
}

TEST(Fsdp, FourRanksTrainAsDdpWithinRounding) {
  const auto ddp = train_blocks<Ddp>(4, 4, false);
  const auto fsdp = train_blocks<Fsdp>(4, 4, true);
  std::int64_t held = 0;
  for (int r = 0; r < 4; ++r) {
    const auto& f = fsdp[static_cast<std::size_t>(r)];
    for (std::size_t i = 0; i < f.weights.size(); ++i) {
      EXPECT_TRUE(at::allclose(f.weights[i], ddp[0].weights[i], 1e-5, 1e-7)) << "rank " << r << " tensor " << i;
    }
    held += f.held_between_steps - 97;
  }
  EXPECT_EQ(held, 816) << "each block tensor's weights on exactly one rank between steps";
}

TEST(Fsdp, ATiedWeightInTwoUnitsIsAConfigError) {
  run_strategy_ranks<Fsdp>(2, DdpOptions{}, [](Fsdp& s, int) {
    const at::Tensor a = at::zeros({4}).requires_grad_(true), b = at::zeros({4}).requires_grad_(true);
    s.set_units({"one", "two"}, {{0, 1}, {1}});
    expect_config_error([&] { s.shard({a, b}); }, "belongs to both unit one and unit two");
  });
}

}  // namespace
}  // namespace bellows::dist
