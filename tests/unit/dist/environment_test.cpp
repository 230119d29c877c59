// Rank detection from torchrun, SLURM, Open MPI and MPICH environments, and its errors.
#include "bellows/dist/environment.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <map>

#include "bellows/util/error.h"
#include "test_util.h"

namespace bellows::dist {
namespace {

using ::testing::HasSubstr;
using test_support::error_from;

EnvLookup env_of(std::map<std::string, std::string> vars) {
  return [vars = std::move(vars)](const std::string& name) -> std::optional<std::string> {
    const auto it = vars.find(name);
    if (it == vars.end()) return std::nullopt;
    return it->second;
  };
}

TEST(DistEnvironment, NoLauncherIsRankZeroOfOne) {
  const ProcessInfo p = detect_process(env_of({}));
  EXPECT_EQ(p.world_size, 1);
  EXPECT_EQ(p.rank, 0);
  EXPECT_FALSE(p.distributed());
  EXPECT_EQ(p.launcher, "none");
}

TEST(DistEnvironment, TorchrunStyle) {
  const ProcessInfo p = detect_process(env_of({{"RANK", "3"}, {"WORLD_SIZE", "8"}, {"LOCAL_RANK", "1"}, {"LOCAL_WORLD_SIZE", "2"},
                                               {"MASTER_ADDR", "node7"}, {"MASTER_PORT", "29411"}}));
  EXPECT_EQ(p.launcher, "an env:// launcher");  // neither torchrun's nor bellows launch's marks
  EXPECT_TRUE(p.shares_node_cores());
  EXPECT_EQ(p.rank, 3);
  EXPECT_EQ(p.world_size, 8);
  EXPECT_EQ(p.local_rank, 1);
  EXPECT_EQ(p.local_world_size, 2);
  EXPECT_EQ(p.master_addr, "node7");
  EXPECT_EQ(p.master_port, 29411);
  EXPECT_THAT(p.reason, HasSubstr("RANK=3 WORLD_SIZE=8"));
  // The plan names the launcher by what it sets beside the variables.
  EXPECT_EQ(detect_process(env_of({{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"TORCHELASTIC_RUN_ID", "none"}})).launcher, "torchrun");
  const ProcessInfo ours = detect_process(env_of({{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"BELLOWS_LAUNCHER", "bellows launch"}}));
  EXPECT_EQ(ours.launcher, "bellows launch");
  EXPECT_TRUE(ours.shares_node_cores());
}

TEST(DistEnvironment, SlurmTaskOfAnSrunStep) {
  const ProcessInfo p = detect_process(env_of({{"SLURM_PROCID", "5"}, {"SLURM_NTASKS", "8"}, {"SLURM_LOCALID", "1"}, {"SLURM_STEP_ID", "0"},
                                               {"SLURM_NODEID", "1"}, {"SLURM_TASKS_PER_NODE", "4(x2)"}, {"SLURM_JOB_ID", "123456"},
                                               {"SLURM_JOB_NODELIST", "gpu[017-018],cpu3"}}));
  EXPECT_EQ(p.launcher, "slurm");
  EXPECT_EQ(p.rank, 5);
  EXPECT_EQ(p.world_size, 8);
  EXPECT_EQ(p.local_rank, 1);
  EXPECT_EQ(p.local_world_size, 4);
  EXPECT_EQ(p.master_addr, "gpu017");
  EXPECT_EQ(p.master_port, 10000 + 123456 % 10000);
  // The batch script itself (no step id) is one process, and the plan says why the variable present was not enough;
  // torchrun's variables win over SLURM's.
  const ProcessInfo script = detect_process(env_of({{"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "8"}}));
  EXPECT_EQ(script.world_size, 1);
  EXPECT_EQ(script.launcher, "none");
  EXPECT_THAT(script.reason, HasSubstr("SLURM_PROCID=0 but no SLURM_STEP_ID: this shell is the allocation's (a batch script or salloc)"));
  EXPECT_EQ(detect_process(env_of({{"SLURM_PROCID", "5"}, {"SLURM_NTASKS", "8"}, {"SLURM_STEP_ID", "0"}, {"SLURM_JOB_NODELIST", "n1"},
                                   {"RANK", "0"}, {"WORLD_SIZE", "2"}}))
                .launcher,
            "an env:// launcher");
}

TEST(DistEnvironment, OpenMpiAndMpich) {
  const ProcessInfo o = detect_process(env_of({{"OMPI_COMM_WORLD_RANK", "1"}, {"OMPI_COMM_WORLD_SIZE", "2"},
                                               {"OMPI_COMM_WORLD_LOCAL_RANK", "1"}, {"OMPI_COMM_WORLD_LOCAL_SIZE", "2"}}));
  EXPECT_EQ(o.launcher, "openmpi");
  EXPECT_EQ(o.rank, 1);
  EXPECT_EQ(o.master_addr, "127.0.0.1");  // all ranks on this node
  const ProcessInfo m = detect_process(env_of({{"PMI_RANK", "2"}, {"PMI_SIZE", "4"}, {"MPI_LOCALRANKID", "0"}, {"MPI_LOCALNRANKS", "2"},
                                               {"MASTER_ADDR", "10.0.0.1"}}));
  EXPECT_EQ(m.launcher, "mpich");
  EXPECT_EQ(m.rank, 2);
  EXPECT_EQ(m.world_size, 4);
  EXPECT_EQ(m.master_addr, "10.0.0.1");
}

TEST(DistEnvironment, SlurmNodeListsAndTaskCounts) {
  EXPECT_EQ(first_slurm_host("gpu[003-004,010],cpu01"), "gpu003");
  EXPECT_EQ(first_slurm_host("n1,n2"), "n1");
  EXPECT_EQ(first_slurm_host("a-b[9,12]"), "a-b9");
  EXPECT_EQ(first_slurm_host("single"), "single");
  EXPECT_EQ(slurm_tasks_on_node("4(x2),3", 0), 4);
  EXPECT_EQ(slurm_tasks_on_node("4(x2),3", 1), 4);
  EXPECT_EQ(slurm_tasks_on_node("4(x2),3", 2), 3);
  EXPECT_EQ(error_from([] { slurm_tasks_on_node("4(x2)", 2); }).kind(), ErrorKind::kConfig);
  EXPECT_EQ(error_from([] { first_slurm_host("gpu[1-2"); }).kind(), ErrorKind::kConfig);
}

TEST(DistEnvironment, BadValuesNameTheVariable) {
  Error e = error_from([] { detect_process(env_of({{"RANK", "2"}, {"WORLD_SIZE", "2"}})); });
  EXPECT_EQ(e.kind(), ErrorKind::kConfig);
  EXPECT_THAT(e.message(), HasSubstr("rank 2 outside [0, 2)"));
  e = error_from([] { detect_process(env_of({{"RANK", "x"}, {"WORLD_SIZE", "2"}})); });
  EXPECT_THAT(e.message(), HasSubstr("RANK='x' is not an integer"));
  e = error_from([] { detect_process(env_of({{"RANK", "0"}})); });
  EXPECT_THAT(e.message(), HasSubstr("without WORLD_SIZE"));
  e = error_from([] { detect_process(env_of({{"RANK", "0"}, {"WORLD_SIZE", "4"}, {"LOCAL_WORLD_SIZE", "2"}})); });
  EXPECT_THAT(e.message(), HasSubstr("without MASTER_ADDR"));
  e = error_from([] { detect_process(env_of({{"RANK", "0"}, {"WORLD_SIZE", "1"}, {"MASTER_PORT", "70000"}})); });
  EXPECT_THAT(e.message(), HasSubstr("master port 70000"));
}

}  // namespace
}  // namespace bellows::dist
