// `bellows slurm CONFIG [key=value ...] [--nodes ...]`: writes an sbatch script for a data-parallel run
// (app/slurm.h). The config is resolved first, so a bad key fails here and not in the queue.
#include <unistd.h>

#include <filesystem>
#include <iostream>

#include "bellows/app/run_settings.h"
#include "bellows/app/schema.h"
#include "bellows/lab/slurm.h"
#include "bellows/util/atomic_file.h"
#include "command.h"
#include "exit_codes.h"

namespace bellows::cli {

Action register_slurm(CLI::App& app) {
  auto o = std::make_shared<lab::SlurmOptions>();
  auto output = std::make_shared<std::string>();
  auto positional = std::make_shared<std::vector<std::string>>();
  CLI::App* cmd = app.add_subcommand("slurm", "Write an sbatch script that trains CONFIG data parallel on a SLURM cluster: "
                                              "bellows slurm CONFIG [key=value ...] --nodes 2 --gpus-per-node 4 --partition gpu");
  cmd->add_option("args", *positional, "CONFIG, then key=value overrides for every task")->required();
  describe_config_command(cmd, {"CONFIG.yaml [key=value ...] [OPTIONS]"});
  cmd->add_option("--nodes", o->nodes, "nodes")->capture_default_str();
  cmd->add_option("--gpus-per-node", o->gpus_per_node, "GPUs per node (0: CPU nodes); one task per GPU")->capture_default_str();
  cmd->add_option("--tasks-per-node", o->tasks_per_node, "tasks per CPU node (default 1; on GPU nodes one per GPU)");
  cmd->add_option("--cpus-per-node", o->cpus_per_node, "cores of a compute node (default: this machine's), shared by its tasks");
  cmd->add_option("--partition", o->partition, "partition");
  cmd->add_option("--account", o->account, "account to charge");
  cmd->add_option("--time", o->time, "time limit, [D-]HH:MM:SS")->capture_default_str();
  cmd->add_option("--signal-s", o->signal_s, "seconds before the limit at which the tasks get SIGTERM and checkpoint")->capture_default_str();
  cmd->add_option("--bellows", o->bellows, "the bellows executable on the compute nodes (default: this one)");
  cmd->add_option("-o,--output", *output, "where to write the script (default: <name>.sbatch)");
  return [cmd, o, output, positional]() {
    if (!cmd->parsed()) return -1;
    std::vector<std::string> args = *positional;
    o->config = args.front();
    o->overrides.assign(args.begin() + 1, args.end());
    const config::Config c = app::resolve_config(o->config, o->overrides);  // fails now, not in the queue
    const app::RunSettings run = app::run_settings(c);
    o->job_name = run.name;
    o->output_dir = run.output_dir;
    if (o->bellows == "bellows") o->bellows = self_executable();
    const std::string script = lab::slurm_script(*o);
    // SLURM opens --output before the script runs: the run directory must exist at submission.
    std::filesystem::create_directories(std::filesystem::path(o->output_dir) / o->job_name);
    const std::filesystem::path path = output->empty() ? std::filesystem::path(o->job_name + ".sbatch") : std::filesystem::path(*output);
    write_file_atomically(path, script);
    std::cout << "wrote " << path.string() << "; submit it with: sbatch " << path.string() << "\n";
    return kExitOk;
  };
}

}  // namespace bellows::cli
