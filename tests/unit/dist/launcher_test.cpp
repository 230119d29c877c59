// The local launcher: torchrun's environment per process, the first failure stopping the others, signal
// forwarding, and its errors. The processes are /bin/sh one-liners.
#include "bellows/dist/launcher.h"

#include <fmt/format.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <csignal>
#include <filesystem>
#include <fstream>
#include <thread>

#include "bellows/util/error.h"
#include "test_util.h"

namespace bellows::dist {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;
using test_support::error_from;

fs::path scratch(const std::string& tag) {
  const fs::path d = fs::path(::testing::TempDir()) / (tag + "_" + std::to_string(getpid()));
  fs::remove_all(d);
  fs::create_directories(d);
  return d;
}

LaunchOptions shell(int nproc, const std::string& script) {
  LaunchOptions o;
  o.nproc = nproc;
  o.command = {"/bin/sh", "-c", script};
  o.master_port = 29000 + static_cast<int>(getpid() % 500);  // node 0 checks that it is free
  return o;
}

TEST(DistLauncher, EveryProcessGetsTorchrunsEnvironment) {
  const fs::path dir = scratch("launch_env");
  LaunchOptions o = shell(3, "echo \"$RANK $LOCAL_RANK $WORLD_SIZE $LOCAL_WORLD_SIZE $MASTER_ADDR $MASTER_PORT $GROUP_RANK\" > " +
                                 dir.string() + "/$RANK");
  o.nnodes = 2;
  o.node_rank = 1;  // ranks 3, 4, 5
  o.master_addr = "10.1.2.3";
  const LaunchResult r = launch(o);
  ASSERT_EQ(r.exit_code, 0) << r.message;
  EXPECT_EQ(r.exit_codes, (std::vector<int>{0, 0, 0}));
  for (int local = 0; local < 3; ++local) {
    std::ifstream in(dir / std::to_string(3 + local));
    std::string line;
    std::getline(in, line);
    EXPECT_EQ(line, fmt::format("{} {} 6 3 10.1.2.3 {} 1", 3 + local, local, o.master_port));
  }
}

TEST(DistLauncher, TheFirstFailureStopsTheOthersAndIsNamed) {
  // Local rank 1 fails at once; the others would sleep for a minute.
  const LaunchOptions o = shell(3, "if [ \"$LOCAL_RANK\" = 1 ]; then exit 3; fi; exec sleep 60");
  const auto t0 = std::chrono::steady_clock::now();
  const LaunchResult r = launch(o);
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(20));
  EXPECT_EQ(r.exit_code, 3);
  EXPECT_THAT(r.message, HasSubstr("rank 1 (local rank 1"));
  EXPECT_THAT(r.message, HasSubstr("exited with code 3; stopping the other 2"));
  EXPECT_EQ(r.exit_codes[1], 3);
  EXPECT_EQ(r.exit_codes[0], 128 + SIGTERM);
  EXPECT_EQ(r.exit_codes[2], 128 + SIGTERM);
}

TEST(DistLauncher, ForwardsASignalOnce) {
  std::atomic<int> stop{0};
  std::thread sender([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    stop.store(SIGINT);
  });
  // Each process exits 5 on SIGINT, as `bellows train` does after its checkpoint.
  const LaunchResult r = launch(shell(2, "sleep 60 & trap 'kill $!; exit 5' INT; wait"), &stop);
  sender.join();
  EXPECT_EQ(r.exit_code, 5);
  EXPECT_THAT(r.message, HasSubstr("after signal 2"));
  EXPECT_EQ(r.exit_codes, (std::vector<int>{5, 5}));
}

TEST(DistLauncher, BadArgumentsAndABusyPort) {
  LaunchOptions o = shell(0, "true");
  Error e = error_from([&] { launch(o); });
  EXPECT_EQ(e.kind(), ErrorKind::kUsage);
  EXPECT_THAT(e.message(), HasSubstr("-n/--nproc is 0"));
  o = shell(1, "true");
  o.nnodes = 2;
  o.node_rank = 2;
  EXPECT_THAT(error_from([&] { launch(o); }).message(), HasSubstr("--node-rank 2 is outside [0, 2)"));
  o = shell(1, "true");
  o.command.clear();
  EXPECT_EQ(error_from([&] { launch(o); }).kind(), ErrorKind::kUsage);
  // A port something listens on already.
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_ANY);
  a.sin_port = 0;
  ASSERT_EQ(bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)), 0);
  ASSERT_EQ(listen(fd, 1), 0);
  socklen_t len = sizeof(a);
  getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  o = shell(2, "true");
  o.master_port = ntohs(a.sin_port);
  e = error_from([&] { launch(o); });
  close(fd);
  EXPECT_EQ(e.kind(), ErrorKind::kResource);
  EXPECT_THAT(e.message(), HasSubstr(fmt::format("master port {} on this node is in use", o.master_port)));
}

}  // namespace
}  // namespace bellows::dist
