// Who this process is in a multi-process job, read from the environment every cluster launcher already sets:
// torchrun and `bellows launch` (RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR, MASTER_PORT),
// SLURM's srun (SLURM_PROCID, SLURM_NTASKS, SLURM_LOCALID, the first host of SLURM_STEP_NODELIST or
// SLURM_JOB_NODELIST as master), Open MPI (OMPI_COMM_WORLD_*) and MPICH/Hydra (PMI_RANK, PMI_SIZE,
// MPI_LOCALRANKID, MPI_LOCALNRANKS). A process none of them started is rank 0 of 1.
#pragma once

#include <functional>
#include <optional>
#include <string>

namespace bellows::dist {

// What `bellows launch` sets BELLOWS_LAUNCHER to in each process, and the name the plan gives it.
inline constexpr const char* kBellowsLaunch = "bellows launch";

struct ProcessInfo {
  int rank = 0;
  int world_size = 1;
  int local_rank = 0;
  int local_world_size = 1;
  std::string master_addr = "127.0.0.1";
  int master_port = 29500;
  // none | bellows launch | torchrun | an env:// launcher (RANK/WORLD_SIZE without torchrun's or bellows' marks) |
  // slurm | openmpi | mpich
  std::string launcher = "none";
  std::string reason;             // the variables that said so, for the plan table
  // CPU cores for this process when the launcher says (SLURM_CPUS_PER_TASK); 0: not said. Launchers that bind
  // processes to cores (srun, mpirun) leave each one its own cores; torchrun-style ones (and `bellows launch`)
  // leave every process all of the node's, which they share.
  int cpus_per_process = 0;
  // Started through torch.distributed's env:// variables (RANK/WORLD_SIZE): `bellows launch`, torchrun or another.
  bool env_style = false;
  bool shares_node_cores() const { return env_style; }

  bool distributed() const { return world_size > 1; }
  bool is_main() const { return rank == 0; }
};

// An environment variable's value, or nullopt when unset (tests pass their own).
using EnvLookup = std::function<std::optional<std::string>(const std::string&)>;
std::optional<std::string> process_env(const std::string& name);

// kConfig errors name the variable and its value: a rank outside [0, world size), a world size below 1, a
// port outside 1-65535, an MPI job of several nodes without MASTER_ADDR.
ProcessInfo detect_process(const EnvLookup& env = process_env);

// The first host of a SLURM node list: "gpu[003-004,010],cpu01" -> "gpu003", "n1,n2" -> "n1".
std::string first_slurm_host(const std::string& nodelist);

// The number of tasks on this node from SLURM_TASKS_PER_NODE-style text: "4(x2),3" for node 0 -> 4.
int slurm_tasks_on_node(const std::string& tasks_per_node, int node_index);

}  // namespace bellows::dist
