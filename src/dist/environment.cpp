// Rank detection from launcher environments; see environment.h.
#include "bellows/dist/environment.h"

#include <fmt/format.h>

#include <cctype>
#include <charconv>
#include <cstdlib>

#include "bellows/util/check.h"

namespace bellows::dist {
namespace {

// An integer variable; kConfig error naming it when it is set but not an integer.
std::optional<long long> env_int(const EnvLookup& env, const std::string& name) {
  const auto text = env(name);
  if (!text) return std::nullopt;
  long long value = 0;
  const char* end = text->data() + text->size();
  const auto [ptr, ec] = std::from_chars(text->data(), end, value);
  BELLOWS_CHECK_CONFIG(ec == std::errc() && ptr == end && !text->empty(),
                       fmt::format("environment variable {}='{}' is not an integer", name, *text),
                       "unset it or give it the integer the launcher meant");
  return value;
}

int required_int(const EnvLookup& env, const std::string& name, const std::string& launcher) {
  const auto v = env_int(env, name);
  BELLOWS_CHECK_CONFIG(v.has_value(), fmt::format("{} environment without {}", launcher, name),
                       fmt::format("start the job through {} itself, or set {}", launcher, name));
  return static_cast<int>(*v);
}

void check_info(const ProcessInfo& p) {
  BELLOWS_CHECK_CONFIG(p.world_size >= 1, fmt::format("world size {} ({}): expected at least 1", p.world_size, p.reason),
                       "check the launcher's task count");
  BELLOWS_CHECK_CONFIG(p.rank >= 0 && p.rank < p.world_size,
                       fmt::format("rank {} outside [0, {}) ({}): the world size disagrees with the rank", p.rank, p.world_size, p.reason),
                       "every process of a job must see the same world size");
  BELLOWS_CHECK_CONFIG(p.local_world_size >= 1 && p.local_rank >= 0 && p.local_rank < p.local_world_size,
                       fmt::format("local rank {} outside [0, {}) ({})", p.local_rank, p.local_world_size, p.reason),
                       "check LOCAL_RANK / LOCAL_WORLD_SIZE (or the launcher's equivalents)");
  BELLOWS_CHECK_CONFIG(p.master_port >= 1 && p.master_port <= 65535, fmt::format("master port {} outside 1-65535", p.master_port),
                       "set MASTER_PORT to a free TCP port");
}

// MASTER_ADDR/MASTER_PORT when set; otherwise the loopback address for a job on one node (a job on several
// nodes must say where rank 0 listens).
void master_from_env(const EnvLookup& env, ProcessInfo& p, const std::string& launcher) {
  if (const auto addr = env("MASTER_ADDR"); addr && !addr->empty()) {
    p.master_addr = *addr;
  } else {
    BELLOWS_CHECK_CONFIG(p.local_world_size == p.world_size,
                         fmt::format("{} job of {} processes over several nodes ({} on this one) without MASTER_ADDR", launcher,
                                     p.world_size, p.local_world_size),
                         "export MASTER_ADDR=<rank 0's host> (and MASTER_PORT) to every process");
  }
  if (const auto port = env_int(env, "MASTER_PORT")) p.master_port = static_cast<int>(*port);
}

// An MPI launcher's variable names: rank and size in the world, and on this node.
struct MpiVariables {
  const char* launcher;
  const char* label;
  const char* rank;
  const char* size;
  const char* local_rank;
  const char* local_size;
};

void from_mpi(const EnvLookup& env, const MpiVariables& v, ProcessInfo& p) {
  p.launcher = v.launcher;
  p.rank = required_int(env, v.rank, v.label);
  p.world_size = required_int(env, v.size, v.label);
  p.local_rank = static_cast<int>(env_int(env, v.local_rank).value_or(0));
  p.local_world_size = static_cast<int>(env_int(env, v.local_size).value_or(p.world_size));
  p.reason = fmt::format("{}={} {}={}", v.rank, p.rank, v.size, p.world_size);
  master_from_env(env, p, v.label);
}

}  // namespace

std::optional<std::string> process_env(const std::string& name) {
  const char* v = std::getenv(name.c_str());
  if (v == nullptr) return std::nullopt;
  return std::string(v);
}

std::string first_slurm_host(const std::string& nodelist) {
  // Up to the first comma outside brackets; a bracket range expands to its first member.
  std::string host;
  std::size_t i = 0;
  while (i < nodelist.size() && nodelist[i] != ',') {
    if (nodelist[i] == '[') {
      const std::size_t close = nodelist.find(']', i);
      BELLOWS_CHECK_CONFIG(close != std::string::npos, fmt::format("SLURM node list '{}' has an unclosed '['", nodelist),
                           "set MASTER_ADDR to rank 0's host");
      const std::string inside = nodelist.substr(i + 1, close - i - 1);
      host += inside.substr(0, inside.find_first_of(",-"));
      i = close + 1;
    } else {
      host += nodelist[i++];
    }
  }
  BELLOWS_CHECK_CONFIG(!host.empty(), fmt::format("SLURM node list '{}' names no host", nodelist), "set MASTER_ADDR to rank 0's host");
  return host;
}

int slurm_tasks_on_node(const std::string& text, int node_index) {
  // Comma-separated entries "N" or "N(xK)": K nodes with N tasks each.
  int node = 0;
  std::size_t i = 0;
  while (i < text.size()) {
    std::size_t j = i;
    while (j < text.size() && std::isdigit(static_cast<unsigned char>(text[j]))) ++j;
    BELLOWS_CHECK_CONFIG(j > i, fmt::format("SLURM tasks per node '{}' is not of the form N or N(xK),...", text),
                         "check SLURM_TASKS_PER_NODE");
    const int tasks = std::stoi(text.substr(i, j - i));
    int repeat = 1;
    if (j < text.size() && text[j] == '(') {
      const std::size_t close = text.find(')', j);
      BELLOWS_CHECK_CONFIG(close != std::string::npos && text.compare(j, 2, "(x") == 0,
                           fmt::format("SLURM tasks per node '{}' is not of the form N or N(xK),...", text), "check SLURM_TASKS_PER_NODE");
      repeat = std::stoi(text.substr(j + 2, close - j - 2));
      j = close + 1;
    }
    if (node_index < node + repeat) return tasks;
    node += repeat;
    i = j < text.size() && text[j] == ',' ? j + 1 : j;
  }
  BELLOWS_FAIL(ErrorKind::kConfig, fmt::format("SLURM tasks per node '{}' lists {} nodes; this is node {}", text, node, node_index),
               "check SLURM_TASKS_PER_NODE and SLURM_NODEID");
}

ProcessInfo detect_process(const EnvLookup& env) {
  ProcessInfo p;
  if (env("RANK") || env("WORLD_SIZE")) {
    // torchrun, `bellows launch`, or any launcher that speaks torch.distributed's env:// convention: named by what
    // it sets beside (`bellows launch` its BELLOWS_LAUNCHER, torchrun its TORCHELASTIC_RUN_ID).
    p.env_style = true;
    p.launcher = env("BELLOWS_LAUNCHER") == std::optional<std::string>(kBellowsLaunch) ? kBellowsLaunch
                 : env("TORCHELASTIC_RUN_ID")                                           ? "torchrun"
                                                                                         : "an env:// launcher";
    p.rank = required_int(env, "RANK", "torchrun-style (RANK/WORLD_SIZE)");
    p.world_size = required_int(env, "WORLD_SIZE", "torchrun-style (RANK/WORLD_SIZE)");
    p.local_rank = static_cast<int>(env_int(env, "LOCAL_RANK").value_or(p.rank));
    p.local_world_size = static_cast<int>(env_int(env, "LOCAL_WORLD_SIZE").value_or(p.world_size));
    p.reason = fmt::format("RANK={} WORLD_SIZE={} LOCAL_RANK={}", p.rank, p.world_size, p.local_rank);
    master_from_env(env, p, "torchrun-style");
  } else if (env("SLURM_PROCID") && env("SLURM_NTASKS") && env("SLURM_STEP_ID")) {
    // A task of an srun step (the batch script itself has no step id of its own tasks).
    p.launcher = "slurm";
    p.rank = required_int(env, "SLURM_PROCID", "SLURM");
    p.world_size = required_int(env, "SLURM_NTASKS", "SLURM");
    p.local_rank = static_cast<int>(env_int(env, "SLURM_LOCALID").value_or(0));
    const auto per_node = env("SLURM_STEP_TASKS_PER_NODE") ? env("SLURM_STEP_TASKS_PER_NODE") : env("SLURM_TASKS_PER_NODE");
    p.local_world_size = per_node ? slurm_tasks_on_node(*per_node, static_cast<int>(env_int(env, "SLURM_NODEID").value_or(0))) : p.world_size;
    p.reason = fmt::format("SLURM_PROCID={} SLURM_NTASKS={} SLURM_LOCALID={}", p.rank, p.world_size, p.local_rank);
    if (const auto addr = env("MASTER_ADDR"); addr && !addr->empty()) {
      p.master_addr = *addr;
    } else {
      const auto nodes = env("SLURM_STEP_NODELIST") ? env("SLURM_STEP_NODELIST") : env("SLURM_JOB_NODELIST");
      BELLOWS_CHECK_CONFIG(nodes.has_value(), "SLURM task without SLURM_STEP_NODELIST or SLURM_JOB_NODELIST",
                           "export MASTER_ADDR=<rank 0's host>");
      p.master_addr = first_slurm_host(*nodes);
    }
    p.cpus_per_process = static_cast<int>(env_int(env, "SLURM_CPUS_PER_TASK").value_or(0));
    // One port per job, so that two jobs sharing a node do not meet (10000-19999, as PyTorch Lightning does).
    if (const auto port = env_int(env, "MASTER_PORT")) p.master_port = static_cast<int>(*port);
    else if (const auto job = env_int(env, "SLURM_JOB_ID")) p.master_port = static_cast<int>(10000 + *job % 10000);
  } else if (env("OMPI_COMM_WORLD_RANK")) {
    from_mpi(env, {"openmpi", "Open MPI", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK",
                   "OMPI_COMM_WORLD_LOCAL_SIZE"}, p);
  } else if (env("PMI_RANK")) {
    from_mpi(env, {"mpich", "MPICH (PMI)", "PMI_RANK", "PMI_SIZE", "MPI_LOCALRANKID", "MPI_LOCALNRANKS"}, p);
  } else if (env("SLURM_PROCID")) {
    // Inside an allocation but not a task of a step: sbatch's script or salloc's shell, one process.
    p.reason = fmt::format("SLURM_PROCID={} but no SLURM_STEP_ID{}: this shell is the allocation's (a batch script or salloc), "
                           "not a task of an srun step; srun starts the ranks", *env("SLURM_PROCID"),
                           env("SLURM_NTASKS") ? "" : " nor SLURM_NTASKS");
  } else {
    p.reason = "no launcher environment (RANK/WORLD_SIZE, SLURM_PROCID, OMPI_COMM_WORLD_RANK, PMI_RANK)";
  }
  check_info(p);
  return p;
}

}  // namespace bellows::dist
