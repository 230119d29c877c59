// Data-parallel ranks as threads of one test process, each with its own Ddp (TCPStore client and process group).
#pragma once

#include <ATen/Parallel.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <torch/nn/modules/linear.h>
#include <torch/utils.h>

#include <exception>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "bellows/dist/ddp.h"
#include "bellows/util/error.h"

namespace bellows::dist {

// A TCP port free on the loopback interface now.
inline int free_port() {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a));
  socklen_t len = sizeof(a);
  getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  close(fd);
  return ntohs(a.sin_port);
}

// The ranks are threads sharing the default generator: seeding and drawing one at a time.
inline std::mutex& init_mutex() {
  static std::mutex m;
  return m;
}

// 4 -> hidden -> hidden -> 1 with tanh, its weights drawn from `seed`.
struct TinyNet : torch::nn::Module {
  torch::nn::Linear a{nullptr}, b{nullptr}, head{nullptr};
  explicit TinyNet(std::uint64_t seed, std::int64_t hidden = 8) {
    const std::lock_guard lock(init_mutex());
    torch::manual_seed(seed);
    a = register_module("a", torch::nn::Linear(4, hidden));
    b = register_module("b", torch::nn::Linear(hidden, hidden));
    head = register_module("head", torch::nn::Linear(hidden, 1));
  }
  at::Tensor forward(const at::Tensor& x) { return head(b(a(x).tanh()).tanh()); }
};

// Runs fn(strategy, rank) on `world` threads, each with its own S (Ddp, Zero1: built from ProcessInfo and
// DdpOptions); rethrows the first exception.
template <typename S>
inline void run_strategy_ranks(int world, const DdpOptions& options, const std::function<void(S&, int)>& fn) {
  const int saved = at::get_num_threads();
  at::set_num_threads(1);
  const int port = free_port();
  std::vector<std::exception_ptr> errors(static_cast<std::size_t>(world));
  std::vector<std::thread> threads;
  for (int r = 0; r < world; ++r) {
    threads.emplace_back([&, r] {
      try {
        ProcessInfo p;
        p.rank = r;
        p.world_size = world;
        p.local_rank = r;
        p.local_world_size = world;
        p.master_port = port;
        S strategy(p, options);
        fn(strategy, r);
      } catch (...) {
        errors[static_cast<std::size_t>(r)] = std::current_exception();
      }
    });
  }
  for (auto& t : threads) t.join();
  at::set_num_threads(saved);
  for (auto& e : errors) {
    if (e) std::rethrow_exception(e);
  }
}

inline void run_ranks(int world, const DdpOptions& options, const std::function<void(Ddp&, int)>& fn) {
  run_strategy_ranks<Ddp>(world, options, fn);
}

// fn() must throw a kConfig error whose text contains `text`.
inline void expect_config_error(const std::function<void()>& fn, const std::string& text) {
  try {
    fn();
    ADD_FAILURE() << "no error; expected one containing: " << text;
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kConfig) << e.what();
    EXPECT_NE(std::string(e.what()).find(text), std::string::npos) << e.what();
  }
}

}  // namespace bellows::dist
