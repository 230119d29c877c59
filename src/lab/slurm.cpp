// sbatch scripts; see slurm.h.
#include "bellows/lab/slurm.h"

#include <fmt/format.h>

#include <regex>

#include "bellows/hw/hardware_info.h"
#include "bellows/util/check.h"

namespace bellows::lab {
namespace {

// Single-quoted for bash: every character literal, a quote closed, escaped and reopened.
std::string quoted(const std::string& s) {
  std::string out = "'";
  for (const char c : s) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

void check_plain(const std::string& value, const std::string& what) {
  BELLOWS_CHECK_USAGE(std::regex_match(value, std::regex("[A-Za-z0-9_.:,+-]*")),
                      fmt::format("{} '{}' has characters an #SBATCH line cannot hold", what, value),
                      "use letters, digits and _ . : , + -");
}

}  // namespace

std::string slurm_script(const SlurmOptions& o) {
  BELLOWS_CHECK_USAGE(o.nodes >= 1, fmt::format("--nodes {} : expected at least 1", o.nodes), "bellows slurm CONFIG --nodes 2");
  BELLOWS_CHECK_USAGE(o.gpus_per_node >= 0, fmt::format("--gpus-per-node {}: expected 0 (CPU nodes) or more", o.gpus_per_node),
                      "use the number of GPUs each node gives the job");
  BELLOWS_CHECK_USAGE(o.tasks_per_node >= 0 && o.cpus_per_node >= 0 && o.signal_s >= 0,
                      fmt::format("--tasks-per-node {}, --cpus-per-node {}, --signal-s {}: expected >= 0", o.tasks_per_node, o.cpus_per_node,
                                  o.signal_s),
                      "0 picks the default");
  BELLOWS_CHECK_USAGE(std::regex_match(o.time, std::regex(R"((\d+-)?\d{1,2}(:\d{2}){0,2}|\d+)")),
                      fmt::format("--time '{}' is not a SLURM time limit", o.time), "use HH:MM:SS, D-HH:MM:SS, MM:SS or minutes");
  check_plain(o.partition, "--partition");
  check_plain(o.account, "--account");
  check_plain(o.job_name, "the job name (the config's name)");
  const int tasks = o.tasks_per_node > 0 ? o.tasks_per_node : std::max(1, o.gpus_per_node);
  BELLOWS_CHECK_USAGE(o.gpus_per_node == 0 || tasks == o.gpus_per_node,
                      fmt::format("--tasks-per-node {} with --gpus-per-node {}: data parallel runs one task per GPU", tasks, o.gpus_per_node),
                      "leave --tasks-per-node out on GPU nodes");
  const int cores = o.cpus_per_node > 0 ? o.cpus_per_node : hw::HardwareInfo::get().cpu.usable_cpus;
  const int cpus_per_task = std::max(1, cores / tasks);
  const std::filesystem::path config = std::filesystem::absolute(o.config);
  const std::filesystem::path run_dir = std::filesystem::absolute(std::filesystem::path(o.output_dir) / o.job_name);

  std::string s = "#!/bin/bash\n";
  s += fmt::format("#SBATCH --job-name={}\n", o.job_name);
  s += fmt::format("#SBATCH --nodes={}\n#SBATCH --ntasks-per-node={}\n#SBATCH --cpus-per-task={}\n", o.nodes, tasks, cpus_per_task);
  if (o.gpus_per_node > 0) s += fmt::format("#SBATCH --gres=gpu:{}\n", o.gpus_per_node);
  if (!o.partition.empty()) s += fmt::format("#SBATCH --partition={}\n", o.partition);
  if (!o.account.empty()) s += fmt::format("#SBATCH --account={}\n", o.account);
  s += fmt::format("#SBATCH --time={}\n", o.time);
  s += fmt::format("#SBATCH --output={}/slurm-%j.out\n#SBATCH --open-mode=append\n", run_dir.string());
  // SIGTERM to every task this long before the limit; pre-emption sends SIGTERM too. Requeued jobs restart here.
  if (o.signal_s > 0) s += fmt::format("#SBATCH --signal=TERM@{}\n", o.signal_s);
  s += "#SBATCH --requeue\n\n";
  s += fmt::format(
      "# Written by `bellows slurm`: {} node(s) x {} task(s), one rank per task ({} in all){}.\n"
      "# Each task is `bellows train`; it reads its rank from SLURM_PROCID/SLURM_NTASKS and meets the others at the\n"
      "# first node of the allocation. On SIGTERM (the time limit, pre-emption) every rank stops at the same step,\n"
      "# rank 0 writes a checkpoint and the tasks exit 5; the job is then requeued and `resume=auto` continues.\n",
      o.nodes, tasks, o.nodes * tasks, o.gpus_per_node > 0 ? ", one GPU each" : " on CPU nodes");
  s += "export OMP_NUM_THREADS=$SLURM_CPUS_PER_TASK\n";
  std::string command = fmt::format("srun --kill-on-bad-exit=1 {} train {} resume=auto", quoted(o.bellows), quoted(config.string()));
  for (const auto& kv : o.overrides) command += " " + quoted(kv);
  s += command + "\n";
  s += "rc=$?\n";
  s += "if [ \"$rc\" -eq 5 ]; then  # interrupted after a clean checkpoint: continue in a new allocation\n"
       "  scontrol requeue \"$SLURM_JOB_ID\"\n"
       "fi\n"
       "exit $rc\n";
  return s;
}

}  // namespace bellows::lab
