// Data parallel over Gloo with the ranks as threads of this process (each its own TCPStore client and
// process group): replicas made equal, gradients equal to one process's on the whole batch (also with
// accumulation and many buckets), a non-finite gradient on one rank reaching all, a parameter unused on one
// rank, and a stalled rank failing the other within the timeout.
#include "bellows/dist/ddp.h"

#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <torch/nn/modules/batchnorm.h>
#include <torch/nn/modules/linear.h>
#include <unistd.h>

#include <chrono>
#include <exception>
#include <functional>
#include <mutex>
#include <thread>

#include "bellows/util/error.h"
#include "dist/ranks.h"
#include "test_util.h"

namespace bellows::dist {
namespace {

using ::testing::HasSubstr;

using Net = TinyNet;

std::vector<at::Tensor> grads_of(Net& n) {
  std::vector<at::Tensor> g;
  for (const auto& p : n.parameters()) g.push_back(p.grad().clone());
  return g;
}

at::Tensor rows_of(const at::Tensor& t, int rank, int world) { return t.slice(0, rank, t.size(0), world); }

TEST(Ddp, GradientsAreTheMeanOfOneProcessAlsoWithAccumulationAndManyBuckets) {
  torch::manual_seed(0);
  const at::Tensor x = at::randn({2, 8, 4}), y = at::randn({2, 8, 1});  // 2 micro-batches of 8
  // One process over the whole batch: both micro-batches, each loss a mean over its 8 samples, halved.
  Net reference(1);
  for (int micro = 0; micro < 2; ++micro) ((reference.forward(x[micro]) - y[micro]).square().mean() / 2).backward();
  const std::vector<at::Tensor> expected = grads_of(reference);
  for (const double bucket_mb : {25.0, 1e-6}) {  // one bucket; one parameter per bucket
    DdpOptions o;
    o.bucket_mb = bucket_mb;
    std::vector<std::vector<at::Tensor>> got(2);
    std::vector<Ddp::Stats> stats(2);
    run_ranks(2, o, [&](Ddp& ddp, int r) {
      Net net(r == 0 ? 1 : 99);  // rank 1 starts elsewhere: setup() gives it rank 0's weights
      ddp.setup(net, net.parameters());
      for (int micro = 0; micro < 2; ++micro) {
        std::optional<Strategy::NoSync> local;
        if (micro == 0) local.emplace(ddp.no_sync());
        ddp.backward((net.forward(rows_of(x[micro], r, 2)) - rows_of(y[micro], r, 2)).square().mean() / 2);
      }
      ddp.finish_gradients();
      got[static_cast<std::size_t>(r)] = grads_of(net);
      stats[static_cast<std::size_t>(r)] = ddp.last_stats();
    });
    for (int r = 0; r < 2; ++r) {
      ASSERT_EQ(got[static_cast<std::size_t>(r)].size(), expected.size());
      for (std::size_t i = 0; i < expected.size(); ++i) {
        EXPECT_TRUE(at::allclose(got[static_cast<std::size_t>(r)][i], expected[i], 1e-5, 1e-7)) << "rank " << r << " parameter " << i
                                                                                                  << " bucket_mb " << bucket_mb;
      }
    }
    EXPECT_EQ(stats[0].buckets, bucket_mb > 1 ? 1u : 6u);
    if (bucket_mb < 1) EXPECT_GT(stats[0].launched_in_backward, 0u);  // communication began during backward
  }
}

TEST(Ddp, ANonFiniteGradientOnOneRankReachesEveryRank) {
  std::vector<char> finite(2, 1);  // not vector<bool>: its packed bits make writes from two threads a data race (TSan)
  run_ranks(2, DdpOptions{}, [&](Ddp& ddp, int r) {
    Net net(3);
    ddp.setup(net, net.parameters());
    at::Tensor loss = net.forward(at::ones({4, 4})).sum();
    if (r == 1) loss = loss * std::numeric_limits<float>::infinity();
    ddp.backward(loss);
    ddp.finish_gradients();
    bool all = true;
    for (const auto& p : net.parameters()) all = all && at::isfinite(p.grad()).all().item<bool>();
    finite[static_cast<std::size_t>(r)] = all ? 1 : 0;
  });
  EXPECT_FALSE(finite[0]);  // so both ranks skip the step together
  EXPECT_FALSE(finite[1]);
}

TEST(Ddp, AParameterUnusedOnOneRankContributesZeros) {
  std::vector<at::Tensor> head_grad(2);
  run_ranks(2, DdpOptions{}, [&](Ddp& ddp, int r) {
    Net net(4);
    DdpOptions small;
    ddp.setup(net, net.parameters());
    const at::Tensor h = net.a(at::ones({2, 4})).tanh();
    // Rank 0 never touches b and head; rank 1 does.
    const at::Tensor loss = r == 0 ? h.sum() : net.head(net.b(h).tanh()).sum();
    ddp.backward(loss);
    ddp.finish_gradients();
    head_grad[static_cast<std::size_t>(r)] = net.head->weight.grad().clone();
  });
  EXPECT_TRUE(at::equal(head_grad[0], head_grad[1]));
  EXPECT_GT(head_grad[0].abs().sum().item<double>(), 0);
}

TEST(Ddp, SyncBuffersGivesEveryRankRankZerosRunningStatistics) {
  std::vector<at::Tensor> mean(2), count(2), before(2);
  for (const bool broadcast : {true, false}) {
    DdpOptions o;
    o.broadcast_buffers = broadcast;
    run_ranks(2, o, [&](Ddp& ddp, int r) {
      torch::nn::BatchNorm1d bn(3);
      ddp.setup(*bn, bn->parameters());
      bn->forward(at::full({4, 3}, static_cast<double>(r + 1)));  // rank-specific statistics
      before[static_cast<std::size_t>(r)] = bn->running_mean.clone();
      ddp.sync_buffers(*bn);
      mean[static_cast<std::size_t>(r)] = bn->running_mean.clone();
      count[static_cast<std::size_t>(r)] = bn->num_batches_tracked.clone();
    });
    ASSERT_FALSE(at::equal(before[0], before[1]));
    if (broadcast) {
      EXPECT_TRUE(at::equal(mean[1], before[0]));  // float and int64 buffers alike
      EXPECT_TRUE(at::equal(count[1], count[0]));
    } else {
      EXPECT_TRUE(at::equal(mean[1], before[1]));
    }
  }
}

TEST(Ddp, AStalledRankMakesTheOtherFailWithinTheTimeout) {
  DdpOptions o;
  o.timeout_s = 2;
  std::atomic<bool> failed{false};
  std::string message;
  const auto t0 = std::chrono::steady_clock::now();
  run_ranks(2, o, [&](Ddp& ddp, int r) {
    Net net(5);
    ddp.setup(net, net.parameters());
    if (r == 1) {  // never reaches the all-reduce: waits until rank 0 gave up
      while (!failed.load()) std::this_thread::sleep_for(std::chrono::milliseconds(20));
      return;
    }
    ddp.backward(net.forward(at::ones({2, 4})).sum());
    try {
      ddp.finish_gradients();
    } catch (const Error& e) {
      message = e.message();
      EXPECT_EQ(e.kind(), ErrorKind::kResource);
    }
    failed.store(true);
  });
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(30));
  EXPECT_THAT(message, HasSubstr("rank 0 of 2: gradient all-reduce failed"));
  EXPECT_THAT(message, HasSubstr("dist.timeout_s is 2"));
}

}  // namespace
}  // namespace bellows::dist
