// `bellows launch`: starts the processes of one node of a data-parallel job with torchrun's environment
// (MASTER_ADDR, MASTER_PORT, RANK, LOCAL_RANK, WORLD_SIZE, LOCAL_WORLD_SIZE, GROUP_RANK), forwards SIGINT and
// SIGTERM to them once, and when one fails stops the others (SIGTERM, then SIGKILL after a grace period) and
// reports which rank failed and how. Children run in their own process group, so a terminal's Ctrl-C reaches
// them once, through the launcher, and they get SIGTERM if the launcher itself dies.
#pragma once

#include <atomic>
#include <string>
#include <vector>

namespace bellows::dist {

struct LaunchOptions {
  int nproc = 1;                          // processes on this node
  int nnodes = 1;
  int node_rank = 0;
  std::string master_addr = "127.0.0.1";  // where rank 0 (on node 0) listens
  int master_port = 29500;
  std::vector<std::string> command;       // each process's argv; command[0] is a path or a name on PATH
  double grace_s = 30;                    // after a failure: how long the others get between SIGTERM and SIGKILL
};

struct LaunchResult {
  int exit_code = 0;             // 0 when every process exited 0; else the first failure's code (128 + signal if killed)
  std::string message;           // names the first failing rank, its pid and its exit code or signal
  std::vector<int> exit_codes;   // per local process, in local-rank order
};

// kUsage errors for nproc, nnodes, node rank or port out of range and an empty command; kResource when node 0's
// master port is already in use (checked before anything starts) or a process cannot be started. `stop`: set by
// the caller's signal handler to the signal number (SIGINT/SIGTERM) to forward; read and reset here.
LaunchResult launch(const LaunchOptions& options, std::atomic<int>* stop = nullptr);

// The environment of local process `local_rank` (added to the parent's).
std::vector<std::pair<std::string, std::string>> launch_environment(const LaunchOptions& options, int local_rank);

}  // namespace bellows::dist
