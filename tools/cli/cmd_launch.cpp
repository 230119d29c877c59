// `bellows launch`: the processes of one node of a data-parallel job, with torchrun's environment
// (dist/launcher.h). `bellows launch -n 2 -- train CONFIG key=value ...` runs two ranks of `bellows train`;
// any other program after `--` gets the same environment (a C++ program that trains with bellows::app::run).
#include <fmt/format.h>
#include <unistd.h>

#include <atomic>
#include <csignal>
#include <filesystem>
#include <iostream>

#include "bellows/dist/launcher.h"
#include "command.h"
#include "exit_codes.h"

namespace bellows::cli {
namespace {

std::atomic<int> g_forward{0};
static_assert(std::atomic<int>::is_always_lock_free, "the signal handler needs a lock-free value");
extern "C" void on_launch_signal(int sig) { g_forward.store(sig); }

}  // namespace

std::string self_executable() {
  std::error_code ec;
  const auto p = std::filesystem::read_symlink("/proc/self/exe", ec);
  return ec ? std::string("bellows") : p.string();
}

Action register_launch(CLI::App& app) {
  auto o = std::make_shared<dist::LaunchOptions>();
  CLI::App* cmd = app.add_subcommand(
      "launch", "Start the processes of one node of a data-parallel job: bellows launch -n N [--nnodes M --node-rank R "
                "--master-addr A --master-port P] -- train CONFIG [key=value ...]");
  cmd->add_option("-n,--nproc", o->nproc, "processes on this node (one per GPU, or a share of the CPU cores each)")->required();
  cmd->add_option("--nnodes", o->nnodes, "nodes in the job")->capture_default_str();
  cmd->add_option("--node-rank", o->node_rank, "this node's number, 0 .. nnodes-1 (node 0 hosts rank 0)")->capture_default_str();
  cmd->add_option("--master-addr", o->master_addr, "rank 0's host, reachable from every node")->capture_default_str();
  cmd->add_option("--master-port", o->master_port, "a free TCP port on rank 0's host")->capture_default_str();
  cmd->add_option("--grace-s", o->grace_s, "after a process fails: seconds the others get between SIGTERM and SIGKILL")->capture_default_str();
  cmd->prefix_command(true);
  describe_config_command(cmd, {"[OPTIONS] -- train [CONFIG.yaml] [key=value ...]"}, [] {
    return "Each process gets MASTER_ADDR, MASTER_PORT, RANK, LOCAL_RANK, WORLD_SIZE, LOCAL_WORLD_SIZE and GROUP_RANK. "
           "Ctrl-C or SIGTERM is passed on once; when one process fails the others are stopped and the exit code is "
           "the failing one's.";
  });
  return [cmd, o]() {
    if (!cmd->parsed()) return -1;
    std::vector<std::string> rest = cmd->remaining();
    for (const auto& a : cmd->get_parent()->remaining()) rest.push_back(a);  // CLI11 hands what follows "--" up
    if (!rest.empty() && rest.front() == "--") rest.erase(rest.begin());
    if (rest.empty()) {
      std::cerr << "bellows: error: nothing to launch\n---> HINT: bellows launch -n 2 -- train CONFIG [key=value ...]\n";
      return kExitUsage;
    }
    o->command = rest;
    // A bellows command (train, ...) runs this bellows; anything else is a program of its own.
    if (rest.front().find('/') == std::string::npos && (rest.front() == "train" || rest.front() == "cv" || rest.front() == "predict")) {
      o->command.insert(o->command.begin(), self_executable());
    }
    std::signal(SIGINT, on_launch_signal);
    std::signal(SIGTERM, on_launch_signal);
    const dist::LaunchResult r = dist::launch(*o, &g_forward);
    if (r.exit_code != 0) std::cerr << "bellows launch: " << r.message << "\n";
    return r.exit_code;
  };
}

}  // namespace bellows::cli
