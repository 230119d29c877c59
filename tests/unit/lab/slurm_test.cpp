// The sbatch script of `bellows slurm`: resources, the srun line, pre-emption handling, and bad options.
#include "bellows/lab/slurm.h"

#include "bellows/app/run.h"  // bellows::app, the composition root

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "bellows/util/error.h"
#include "test_util.h"

namespace bellows::lab {
using namespace bellows::app;  // the composition root the tools are built on
namespace {

using ::testing::HasSubstr;
using ::testing::Not;
using test_support::error_from;

SlurmOptions gpu_job() {
  SlurmOptions o;
  o.config = "/cfg/run.yaml";
  o.overrides = {"data.batch_size=64", "optim.lr=3e-4"};
  o.nodes = 2;
  o.gpus_per_node = 4;
  o.cpus_per_node = 64;
  o.partition = "gpu";
  o.account = "proj-1";
  o.time = "1-00:00:00";
  o.bellows = "/opt/bellows/bin/bellows";
  o.job_name = "icon";
  o.output_dir = "/scratch/runs";
  return o;
}

TEST(SlurmScript, GpuNodesOneTaskPerGpuAndRequeueAfterACheckpoint) {
  const std::string s = slurm_script(gpu_job());
  for (const char* line : {"#!/bin/bash\n", "#SBATCH --job-name=icon\n", "#SBATCH --nodes=2\n", "#SBATCH --ntasks-per-node=4\n",
                           "#SBATCH --cpus-per-task=16\n", "#SBATCH --gres=gpu:4\n", "#SBATCH --partition=gpu\n",
                           "#SBATCH --account=proj-1\n", "#SBATCH --time=1-00:00:00\n",
                           "#SBATCH --output=/scratch/runs/icon/slurm-%j.out\n", "#SBATCH --signal=TERM@120\n", "#SBATCH --requeue\n",
                           "srun --kill-on-bad-exit=1 '/opt/bellows/bin/bellows' train '/cfg/run.yaml' resume=auto 'data.batch_size=64' "
                           "'optim.lr=3e-4'\n",
                           "if [ \"$rc\" -eq 5 ]; then", "scontrol requeue \"$SLURM_JOB_ID\""}) {
    EXPECT_THAT(s, HasSubstr(line));
  }
}

TEST(SlurmScript, CpuNodesAndQuoting) {
  SlurmOptions o = gpu_job();
  o.gpus_per_node = 0;
  o.tasks_per_node = 2;
  o.partition.clear();
  o.overrides = {"name=it's"};
  const std::string s = slurm_script(o);
  EXPECT_THAT(s, HasSubstr("#SBATCH --ntasks-per-node=2\n#SBATCH --cpus-per-task=32\n"));
  EXPECT_THAT(s, Not(HasSubstr("--gres")));
  EXPECT_THAT(s, Not(HasSubstr("--partition")));
  EXPECT_THAT(s, HasSubstr("'name=it'\\''s'"));  // one shell word
}

TEST(SlurmScript, BadOptionsAreUsageErrorsNamingThem) {
  SlurmOptions o = gpu_job();
  o.time = "4h";
  Error e = error_from([&] { slurm_script(o); });
  EXPECT_EQ(e.kind(), ErrorKind::kUsage);
  EXPECT_THAT(e.message(), HasSubstr("--time '4h'"));
  o = gpu_job();
  o.nodes = 0;
  EXPECT_THAT(error_from([&] { slurm_script(o); }).message(), HasSubstr("--nodes 0"));
  o = gpu_job();
  o.tasks_per_node = 2;
  EXPECT_THAT(error_from([&] { slurm_script(o); }).message(), HasSubstr("one task per GPU"));
  o = gpu_job();
  o.partition = "gpu;rm";
  EXPECT_THAT(error_from([&] { slurm_script(o); }).message(), HasSubstr("--partition 'gpu;rm'"));
}

}  // namespace
}  // namespace bellows::lab
