// `bellows slurm`: an sbatch script for a data-parallel run on a SLURM cluster (seed 002's GPU partition): one
// task per GPU (or `tasks_per_node` on CPU nodes), CPUs per task from the node's cores, `srun bellows train`
// with `resume=auto`, and pre-emption handled: SLURM sends SIGTERM `signal_s` seconds before the time limit (and
// on pre-emption), bellows writes a checkpoint and exits 5, and the script requeues the job, which continues
// from that checkpoint.
#pragma once

#include <filesystem>
#include <string>
#include <vector>

namespace bellows::lab {

struct SlurmOptions {
  std::filesystem::path config;        // the run config (made absolute in the script)
  std::vector<std::string> overrides;  // key=value, passed to every task
  int nodes = 1;
  int gpus_per_node = 0;               // 0: CPU nodes
  int tasks_per_node = 0;              // 0: gpus_per_node, or 1 on CPU nodes
  int cpus_per_node = 0;               // 0: this machine's usable cores (say it when the compute nodes differ)
  std::string partition, account, time = "04:00:00";
  int signal_s = 120;                  // SIGTERM this long before the time limit
  std::string bellows = "bellows";     // the executable the tasks run
  std::string job_name, output_dir;    // from the config's name and output_dir
};

// The script's text. kUsage errors for counts below 1 (0 allowed where documented), a time not in SLURM's
// [D-]HH:MM:SS / MM:SS / minutes forms, or characters in names that the shell would interpret.
std::string slurm_script(const SlurmOptions& options);

}  // namespace bellows::lab
