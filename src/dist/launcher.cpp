// The local process launcher; see launcher.h. Written by hand: it is fork/exec, waitpid and kill, which no
// library we use does (torchrun is Python).
#include "bellows/dist/launcher.h"

#include "bellows/dist/environment.h"  // defines: kBellowsLaunch

#include <arpa/inet.h>
#include <fmt/format.h>
#include <netdb.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <map>
#include <optional>
#include <thread>

#include "bellows/util/check.h"

extern char** environ;

namespace bellows::dist {
namespace {

// Node 0's rendezvous port must be free before any process starts: afterwards the failure would be rank 0's,
// after the others began waiting for it.
void check_port_free(const std::string& addr, int port) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE;
  addrinfo* found = nullptr;
  // TCPStore listens on every interface; the wildcard address is what it will bind.
  const int rc = getaddrinfo(nullptr, std::to_string(port).c_str(), &hints, &found);
  BELLOWS_CHECK_RESOURCE(rc == 0, fmt::format("cannot resolve the wildcard address for port {}: {}", port, gai_strerror(rc)), "check the network setup");
  std::string error;
  for (addrinfo* a = found; a != nullptr; a = a->ai_next) {
    const int fd = socket(a->ai_family, a->ai_socktype, a->ai_protocol);
    if (fd < 0) continue;
    const int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));  // as TCPStore does: TIME_WAIT is no conflict
    if (bind(fd, a->ai_addr, a->ai_addrlen) != 0 && errno == EADDRINUSE) error = std::strerror(errno);
    close(fd);
    if (!error.empty()) break;
  }
  freeaddrinfo(found);
  BELLOWS_CHECK_RESOURCE(error.empty(), fmt::format("master port {} on this node is in use ({}), so rank 0 could not listen on it", port, error),
                         fmt::format("choose a free port with --master-port (the rendezvous address is {}:{})", addr, port));
}

std::string describe_status(int status) {
  if (WIFEXITED(status)) return fmt::format("exited with code {}", WEXITSTATUS(status));
  if (WIFSIGNALED(status)) return fmt::format("was killed by signal {} ({})", WTERMSIG(status), strsignal(WTERMSIG(status)));
  return "stopped";
}

int code_of(int status) {
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
  return 1;
}

}  // namespace

std::vector<std::pair<std::string, std::string>> launch_environment(const LaunchOptions& o, int local_rank) {
  return {{"MASTER_ADDR", o.master_addr},
          {"MASTER_PORT", std::to_string(o.master_port)},
          {"RANK", std::to_string(o.node_rank * o.nproc + local_rank)},
          {"LOCAL_RANK", std::to_string(local_rank)},
          {"WORLD_SIZE", std::to_string(o.nnodes * o.nproc)},
          {"LOCAL_WORLD_SIZE", std::to_string(o.nproc)},
          {"GROUP_RANK", std::to_string(o.node_rank)},
          {"BELLOWS_LAUNCHER", kBellowsLaunch}};  // the plan's strategy row names the launcher (environment.h)
}

namespace {

void check_launch_options(const LaunchOptions& o) {
  BELLOWS_CHECK_USAGE(o.nproc >= 1, fmt::format("-n/--nproc is {}, expected at least 1 process per node", o.nproc),
                      "bellows launch -n 2 -- train CONFIG");
  BELLOWS_CHECK_USAGE(o.nnodes >= 1, fmt::format("--nnodes is {}, expected at least 1", o.nnodes), "use --nnodes 1 on one machine");
  BELLOWS_CHECK_USAGE(o.node_rank >= 0 && o.node_rank < o.nnodes,
                      fmt::format("--node-rank {} is outside [0, {}) for --nnodes {}", o.node_rank, o.nnodes, o.nnodes),
                      "number the nodes 0 .. nnodes-1; node 0 hosts rank 0");
  BELLOWS_CHECK_USAGE(o.master_port >= 1 && o.master_port <= 65535, fmt::format("--master-port {} is outside 1-65535", o.master_port),
                      "pick a free TCP port, e.g. 29500");
  BELLOWS_CHECK_USAGE(!o.command.empty(), "nothing to launch", "bellows launch -n 2 -- train CONFIG [key=value ...]");
}

// Each child's environment: the launcher's own, with the rendezvous variables of its rank over it ("KEY=value").
std::vector<std::vector<std::string>> launch_child_environments(const LaunchOptions& o) {
  std::vector<std::vector<std::string>> envs(static_cast<std::size_t>(o.nproc));
  for (int r = 0; r < o.nproc; ++r) {
    std::map<std::string, std::string> env;
    for (char** e = environ; *e != nullptr; ++e) {
      const std::string kv = *e;
      const auto eq = kv.find('=');
      if (eq != std::string::npos) env[kv.substr(0, eq)] = kv.substr(eq + 1);
    }
    for (const auto& [k, v] : launch_environment(o, r)) env[k] = v;
    for (const auto& [k, v] : env) envs[static_cast<std::size_t>(r)].push_back(k + "=" + v);
  }
  return envs;
}

// The forked child: async-signal-safe calls only, then the command; it never returns.
[[noreturn]] void exec_launched_child(const LaunchOptions& o, std::vector<char*>& argv, std::vector<char*>& envp, pid_t parent) {
  setpgid(0, 0);                      // Ctrl-C reaches the launcher only; it forwards once
  prctl(PR_SET_PDEATHSIG, SIGTERM);   // the launcher died: stop too
  if (getppid() != parent) _exit(127);
  if (o.command[0].find('/') != std::string::npos) execve(argv[0], argv.data(), envp.data());
  else execvpe(argv[0], argv.data(), envp.data());
  const char msg[] = "bellows launch: cannot execute the command\n";
  (void)!write(STDERR_FILENO, msg, sizeof(msg) - 1);
  _exit(127);
}

// The local processes of a launch and what became of them (an exit code of -1: still running).
struct LaunchedChildren {
  explicit LaunchedChildren(int nproc) : pids(static_cast<std::size_t>(nproc), -1) {
    result.exit_codes.assign(static_cast<std::size_t>(nproc), -1);
  }
  void signal_running(int sig) const {
    for (std::size_t i = 0; i < pids.size(); ++i) {
      if (pids[i] > 0 && result.exit_codes[i] < 0) kill(pids[i], sig);
    }
  }
  std::vector<pid_t> pids;
  LaunchResult result;
};

// A fork failed: the processes started so far are killed and reaped before the error.
[[noreturn]] void abandon_launch(const LaunchedChildren& c, int r, int nproc) {
  const std::string why = std::strerror(errno);
  c.signal_running(SIGKILL);
  for (const pid_t p : c.pids) {
    if (p > 0) waitpid(p, nullptr, 0);
  }
  BELLOWS_FAIL(ErrorKind::kResource, fmt::format("cannot start local process {} of {}: {}", r, nproc, why), "check the process limits (ulimit -u)");
}

void start_launched_children(const LaunchOptions& o, LaunchedChildren& c) {
  // --- argv and environment of each child, built before fork (the child only calls async-signal-safe functions) ---
  std::vector<std::vector<std::string>> envs = launch_child_environments(o);
  std::vector<char*> argv;
  for (const auto& a : o.command) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  const pid_t parent = getpid();
  for (int r = 0; r < o.nproc; ++r) {
    std::vector<char*> envp;
    for (auto& kv : envs[static_cast<std::size_t>(r)]) envp.push_back(kv.data());
    envp.push_back(nullptr);
    const pid_t pid = fork();
    if (pid == 0) exec_launched_child(o, argv, envp, parent);
    if (pid < 0) abandon_launch(c, r, o.nproc);
    c.pids[static_cast<std::size_t>(r)] = pid;
  }
}

// The wait's state. When the others get SIGKILL after a failure's SIGTERM: a time point and a flag, not an optional
// (GCC 12 warns that an optional time point may be used uninitialized).
struct LaunchWait {
  int running = 0;
  int forwarded = 0;  // the last signal passed on to the processes
  std::chrono::steady_clock::time_point kill_at{};
  bool killing = false;
};

// A signal the launcher received (`stop`), passed on to the processes still running.
void forward_launch_signal(std::atomic<int>* stop, const LaunchedChildren& c, LaunchWait& w) {
  if (stop == nullptr) return;
  if (const int sig = stop->exchange(0); sig != 0) {
    c.signal_running(sig);
    w.forwarded = sig;
  }
}

// The first failure is the launch's result; it stops the other processes (SIGTERM, then SIGKILL after grace_s).
void record_launch_failure(const LaunchOptions& o, LaunchedChildren& c, LaunchWait& w, std::size_t i, int status) {
  LaunchResult& result = c.result;
  const int rank = o.node_rank * o.nproc + static_cast<int>(i);
  if (result.exit_code != 0 || result.exit_codes[i] == 0) return;
  result.exit_code = result.exit_codes[i];
  result.message = fmt::format("{}rank {} (local rank {}, pid {}) {}", w.forwarded ? fmt::format("after signal {}: ", w.forwarded) : "", rank,
                               i, c.pids[i], describe_status(status));
  if (w.running > 0 && w.forwarded == 0) {  // after a forwarded signal the others are stopping already
    result.message += fmt::format("; stopping the other {} local process(es)", w.running);
    c.signal_running(SIGTERM);
    w.kill_at = std::chrono::steady_clock::now() + std::chrono::milliseconds(static_cast<std::int64_t>(o.grace_s * 1000));
    w.killing = true;
  }
}

// Reaps the processes that ended since the last look; whether any did.
bool reap_launched_children(const LaunchOptions& o, LaunchedChildren& c, LaunchWait& w) {
  bool reaped = false;
  for (std::size_t i = 0; i < c.pids.size(); ++i) {
    int status = 0;
    const pid_t pid = c.pids[i];
    if (c.result.exit_codes[i] >= 0 || waitpid(pid, &status, WNOHANG) != pid) continue;
    reaped = true;
    c.result.exit_codes[i] = code_of(status);
    --w.running;
    record_launch_failure(o, c, w, i, status);
  }
  return reaped;
}

// --- wait: forward signals; the first failure stops the rest ---
void wait_for_launched_children(const LaunchOptions& o, std::atomic<int>* stop, LaunchedChildren& c) {
  LaunchWait w;
  w.running = o.nproc;
  while (w.running > 0) {
    forward_launch_signal(stop, c, w);
    if (reap_launched_children(o, c, w)) continue;
    if (w.killing && std::chrono::steady_clock::now() >= w.kill_at) {
      c.signal_running(SIGKILL);
      w.killing = false;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

}  // namespace

LaunchResult launch(const LaunchOptions& o, std::atomic<int>* stop) {
  check_launch_options(o);
  if (o.node_rank == 0) check_port_free(o.master_addr, o.master_port);
  LaunchedChildren children(o.nproc);
  start_launched_children(o, children);
  wait_for_launched_children(o, stop, children);
  return children.result;
}

}  // namespace bellows::dist
