// ZeRO-1 and ZeRO-2 (dist/zero.h) over Gloo with the ranks as threads: owners are whole tensors given to the
// least-loaded rank; a run trains as ddp does (bitwise on 2 ranks) while each rank's optimizer keeps only its share
// of the state and, under zero2, only its share of the gradients after each step; the gathered state is ddp's,
// entry for entry; a model with fewer tensors than ranks is a config error.
#include "bellows/dist/zero.h"

#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <map>
#include <set>

#include "bellows/train/optimizer.h"
#include "bellows/util/error.h"
#include "bellows/util/module_tensors.h"
#include "dist/ranks.h"

namespace bellows::dist {
namespace {

TEST(Zero1, OwnersAreWholeTensorsGivenToTheLeastLoadedRank) {
  // 10 -> r0; 1 -> r1; 1 -> r1 (2); 8 -> r1 (10); 5: a tie at 10, the lowest rank.
  EXPECT_EQ(assign_owners({10, 1, 1, 8, 5}, {-1, -1, -1, -1, -1}, 2), (std::vector<int>{0, 1, 1, 1, 0}));
  // A tied tensor (same_as) takes its first occurrence's owner and adds no load.
  EXPECT_EQ(assign_owners({10, 1, 10, 3}, {-1, -1, 0, -1}, 2), (std::vector<int>{0, 1, 0, 1}));
  EXPECT_EQ(assign_owners({4, 4, 4}, {-1, -1, -1}, 3), (std::vector<int>{0, 1, 2}));
}

struct RankResult {
  std::vector<at::Tensor> weights;
  StateDict local, gathered;
  std::vector<bool> owned, has_grad;  // per trainable tensor: this rank's optimizer updates it; its gradient after finish_gradients
  std::int64_t grad_elements = 0;     // held after the last step's finish_gradients
};

// `steps` AdamW steps of TinyNet on rank-strided rows of one global batch, with the strategy S, as the trainer runs them.
template <typename S>
std::vector<RankResult> train(int world, int steps) {
  torch::manual_seed(0);
  const at::Tensor x = at::randn({steps, 8, 4}), y = at::randn({steps, 8, 1});
  std::vector<RankResult> results(static_cast<std::size_t>(world));
  run_strategy_ranks<S>(world, DdpOptions{}, [&](S& s, int r) {
    TinyNet net(r == 0 ? 1 : 50 + static_cast<std::uint64_t>(r), 16);  // other ranks start elsewhere: setup() equalises
    train::OptimizerOptions o;
    o.lr = 1e-2;
    const NamedTensors trainable = train::trainable_parameters(bellows::named_parameters(net), o);
    std::vector<at::Tensor> params;
    for (const auto& [name, p] : trainable) params.push_back(p);
    const std::vector<bool> mine = s.shard(params);
    NamedTensors owned;
    for (std::size_t i = 0; i < trainable.size(); ++i) {
      if (mine[i]) owned.push_back(trainable[i]);
    }
    train::Optimizer optimizer(owned, o);
    s.setup(net, params);
    RankResult& out = results[static_cast<std::size_t>(r)];
    out.owned = mine;
    for (int step = 0; step < steps; ++step) {
      const at::Tensor xs = x[step].slice(0, r, 8, world), ys = y[step].slice(0, r, 8, world);
      s.backward((net.forward(xs) - ys).square().mean());
      s.finish_gradients();
      out.has_grad.clear();
      out.grad_elements = 0;
      for (const auto& p : params) {
        out.has_grad.push_back(p.grad().defined());
        out.grad_elements += p.grad().defined() ? p.grad().numel() : 0;
      }
      optimizer.step();
      s.finish_update();
      train::clear_gradients(params);
    }
    for (const auto& p : params) out.weights.push_back(p.detach().clone());
    for (const auto& [key, t] : optimizer.state_dict()) out.local.emplace(key, t.clone());
    out.gathered = s.gather_state(optimizer.state_dict());
  });
  return results;
}

TEST(Zero1, TrainsBitwiseAsDdpWithAShareOfTheStateOnEachRank) {
  const auto ddp = train<Ddp>(2, 4);
  const auto zero = train<Zero1>(2, 4);
  for (int r = 0; r < 2; ++r) {
    const auto& z = zero[static_cast<std::size_t>(r)];
    ASSERT_EQ(z.weights.size(), ddp[0].weights.size());
    for (std::size_t i = 0; i < z.weights.size(); ++i) EXPECT_TRUE(z.weights[i].equal(ddp[0].weights[i])) << "rank " << r << " tensor " << i;
  }
  // Each rank's optimizer keeps its share: the moments of disjoint parameters that together are ddp's.
  std::set<std::string> seen;
  std::int64_t zero_elements[2] = {0, 0}, ddp_elements = 0;
  for (const auto& [key, t] : ddp[0].local) {
    if (key.rfind("exp_avg", 0) == 0) ddp_elements += t.numel();
  }
  for (int r = 0; r < 2; ++r) {
    for (const auto& [key, t] : zero[static_cast<std::size_t>(r)].local) {
      if (key.rfind("exp_avg", 0) != 0) continue;
      EXPECT_TRUE(seen.insert(key).second) << key << " on both ranks";
      zero_elements[r] += t.numel();
    }
  }
  EXPECT_EQ(zero_elements[0] + zero_elements[1], ddp_elements);
  EXPECT_GT(zero_elements[0], 0);
  EXPECT_GT(zero_elements[1], 0);
  EXPECT_LT(zero_elements[0], ddp_elements * 3 / 4) << "about half on each rank (whole tensors)";
  // Gathered on rank 0: every entry of ddp's state, equal; the other ranks get nothing.
  const StateDict& gathered = zero[0].gathered;
  ASSERT_EQ(gathered.size(), ddp[0].local.size());
  for (const auto& [key, t] : ddp[0].local) {
    ASSERT_TRUE(gathered.count(key)) << key;
    EXPECT_TRUE(gathered.at(key).to(at::kCPU).equal(t)) << key;
  }
  EXPECT_TRUE(zero[1].gathered.empty());
  // The ddp strategy hands its local state back unchanged.
  EXPECT_EQ(ddp[1].gathered.size(), ddp[1].local.size());
}

TEST(Zero2, EachRankKeepsItsOwnGradientsAndTrainsBitwiseAsDdpOnTwoRanks) {
  const auto ddp = train<Ddp>(2, 4);
  const auto zero = train<Zero2>(2, 4);
  std::int64_t all_elements = 0;
  for (const auto& w : ddp[0].weights) all_elements += w.numel();
  EXPECT_EQ(ddp[0].grad_elements, all_elements);
  for (int r = 0; r < 2; ++r) {
    const auto& z = zero[static_cast<std::size_t>(r)];
    ASSERT_EQ(z.weights.size(), ddp[0].weights.size());
    // Two ranks: the reduce adds the same two numbers as the all-reduce (a + b is b + a), so ddp's weights exactly.
    for (std::size_t i = 0; i < z.weights.size(); ++i) EXPECT_TRUE(z.weights[i].equal(ddp[0].weights[i])) << "rank " << r << " tensor " << i;
    EXPECT_EQ(z.has_grad, z.owned) << "rank " << r << ": after finish_gradients, the gradients of its own parameters only";
    EXPECT_GT(z.grad_elements, 0);
    EXPECT_LT(z.grad_elements, all_elements * 3 / 4) << "rank " << r << ": about half of the gradient elements";
  }
  EXPECT_EQ(zero[0].grad_elements + zero[1].grad_elements, all_elements);
  const StateDict& gathered = zero[0].gathered;
  ASSERT_EQ(gathered.size(), ddp[0].local.size());
  for (const auto& [key, t] : ddp[0].local) {
    ASSERT_TRUE(gathered.count(key)) << key;
    EXPECT_TRUE(gathered.at(key).to(at::kCPU).equal(t)) << key;
  }
}

TEST(Zero2, FourRanksTrainAsDdpWithinRounding) {
  // With 4 ranks the reduce may add the ranks' gradients in another order than the all-reduce: equal to rounding.
  const auto ddp = train<Ddp>(4, 4);
  const auto zero = train<Zero2>(4, 4);
  std::int64_t held = 0;
  for (int r = 0; r < 4; ++r) {
    const auto& z = zero[static_cast<std::size_t>(r)];
    for (std::size_t i = 0; i < z.weights.size(); ++i) {
      EXPECT_TRUE(at::allclose(z.weights[i], ddp[0].weights[i], 1e-5, 1e-7)) << "rank " << r << " tensor " << i;
    }
    EXPECT_EQ(z.has_grad, z.owned) << "rank " << r;
    held += z.grad_elements;
  }
  EXPECT_EQ(held, ddp[0].grad_elements);  // every gradient on exactly one rank
}

TEST(Zero1, FewerTrainableTensorsThanRanksIsAConfigError) {
  run_strategy_ranks<Zero1>(2, DdpOptions{}, [](Zero1& s, int) {
    const at::Tensor only = at::zeros({4}).requires_grad_(true);
    // One tensor, tied: one owner.
    expect_config_error([&] { s.shard({only, only}); }, "zero1 on 2 ranks, but the model has 1 trainable tensor(s)");
  });
}

}  // namespace
}  // namespace bellows::dist
