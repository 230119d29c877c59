// Data-parallel training end to end: `bellows launch -n 2 -- train` reaches the parameters and the evaluation
// one process reaches with twice the batch (fp32, with accumulation and clipping; fp16-mixed with a sample
// that overflows on one rank, which both skip); two nodes, srun's and mpirun's environments, a SLURM script;
// Ctrl-C and resume; and a rank killed with SIGKILL makes the survivor exit with an error naming it within seconds.
// The sharded strategies (zero1, zero2, fsdp, auto) are in dist_sharded_cli_test.cpp.
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <optional>
#include <string>
#include <vector>

#include "bellows/ckpt/checkpoint.h"
#include "dist_cli.h"  // defines: dist_write_csv, dist_args, transformer_args, dist_final_weights, dist_records
#include "run_cli.h"
#include "test_paths.h"

namespace bellows::testing::dist_cli {
namespace {

using ::testing::HasSubstr;

// Two ranks of batch 8 against one process of batch 16, from the same seed.
void expect_same_training(const std::string& extra, double tolerance, int poison = -1) {
  const fs::path dir = bellows::testing::scratch_dir("bellows_dist");
  const fs::path csv = dist_write_csv(dir, poison);
  const int port = 20000 + static_cast<int>(getpid() % 20000);
  const CliResult two = run_cli(fmt::format("launch -n 2 --master-port {} -- ", port) + dist_args(csv, dir, "two", 8, extra));
  ASSERT_EQ(two.code, 0) << two.out << two.err;
  const CliResult one = run_cli(dist_args(csv, dir, "one", 16, extra));
  ASSERT_EQ(one.code, 0) << one.out << one.err;
  EXPECT_THAT(two.out, HasSubstr("strategy         ddp"));
  EXPECT_THAT(two.out, HasSubstr("= 2 ranks x 8"));  // the global batch
  EXPECT_THAT(two.out, HasSubstr("rank 0 via bellows launch"));  // the launcher that started it (not "torchrun")
  EXPECT_LE(dist_max_relative_difference(dist_final_weights(dir / "two"), dist_final_weights(dir / "one")), tolerance) << extra;
  // Records and evaluations are global: the same loss as one process's, to float rounding.
  const auto t2 = dist_records(dir / "two", "train"), t1 = dist_records(dir / "one", "train");
  ASSERT_EQ(t2.size(), t1.size());
  for (std::size_t i = 0; i < t1.size(); ++i) {
    // A window holding the overflowing sample has a non-finite mean loss (null in JSON) in both runs.
    ASSERT_EQ(t2[i]["loss"].is_number(), t1[i]["loss"].is_number()) << t2[i].dump() << "\n" << t1[i].dump();
    if (!t1[i]["loss"].is_number()) continue;
    EXPECT_NEAR(t2[i]["loss"].get<double>(), t1[i]["loss"].get<double>(), 10 * tolerance * std::abs(t1[i]["loss"].get<double>()));
    EXPECT_EQ(t2[i].value("skipped_steps", 0.0), t1[i].value("skipped_steps", 0.0));
  }
  const auto e2 = dist_records(dir / "two", "eval"), e1 = dist_records(dir / "one", "eval");
  ASSERT_EQ(e2.size(), e1.size());
  ASSERT_FALSE(e1.empty());
  EXPECT_NEAR(e2.back()["loss"].get<double>(), e1.back()["loss"].get<double>(), 10 * tolerance * std::abs(e1.back()["loss"].get<double>()));
  if (poison >= 0) {
    // The overflowing sample is in rank 1's first batch; both ranks skipped that step, as one process did.
    EXPECT_GE(t2.front().value("skipped_steps", 0.0), 1.0) << t2.front().dump();
  }
}

TEST(DistCli, TwoRanksTrainLikeOneProcessWithTwiceTheBatch) { expect_same_training("precision=fp32 data.shuffle=true", 1e-5); }

TEST(DistCli, AccumulationAndClippingToo) {
  expect_same_training("precision=fp32 train.accumulation_steps=2 train.clip_max_norm=0.05", 1e-5);
}

TEST(DistCli, Fp16OverflowOnOneRankIsSkippedByBoth) {
  // Row 1 (sequential order) lands in rank 1's first batch; its 1e6 overflows fp16 in the first matmul.
  expect_same_training("precision=fp16-mixed data.shuffle=false", 1e-3, /*poison=*/1);
}

// Two "nodes": network namespaces joined by a veth pair (iproute2), one rank in each, started by
// `bellows launch --nnodes 2 --node-rank 0|1`; Gloo talks over the veth (GLOO_SOCKET_IFNAME).
TEST(DistCli, TwoNodesOverAVethPairTrainLikeOneProcess) {
  const fs::path dir = bellows::testing::scratch_dir("bellows_dist_nodes");
  const std::string probe = fmt::format("bwp{}", getpid());
  if (std::system(("ip netns add " + probe + " >/dev/null 2>&1 && ip netns del " + probe).c_str()) != 0) {
    GTEST_SKIP() << "network namespaces cannot be created here (needs iproute2 and CAP_SYS_ADMIN): the two-node test does not run";
  }
  const fs::path csv = dist_write_csv(dir);
  const int port = 20000 + static_cast<int>((getpid() + 29) % 20000);
  const std::string train = dist_args(csv, dir, "two", 8, "precision=fp32");
  const std::string script = fmt::format(R"(set -e
cd '{dir}'
a=bwa$$; b=bwb$$
ip netns add $a; ip netns add $b
trap 'ip netns del $a 2>/dev/null; ip netns del $b 2>/dev/null' EXIT
ip link add va$$ type veth peer name vb$$
ip link set va$$ netns $a; ip link set vb$$ netns $b
ip -n $a addr add 10.77.0.1/24 dev va$$; ip -n $b addr add 10.77.0.2/24 dev vb$$
ip -n $a link set lo up; ip -n $b link set lo up; ip -n $a link set va$$ up; ip -n $b link set vb$$ up
launch="--nnodes 2 --master-addr 10.77.0.1 --master-port {port}"
GLOO_SOCKET_IFNAME=va$$ ip netns exec $a '{cli}' launch -n 1 $launch --node-rank 0 -- {train} >node0.out 2>node0.err & p0=$!
GLOO_SOCKET_IFNAME=vb$$ ip netns exec $b '{cli}' launch -n 1 $launch --node-rank 1 -- {train} >node1.out 2>node1.err & p1=$!
set +e
wait $p0; r0=$?; wait $p1; r1=$?
echo "$r0 $r1" > codes
)",
                                        fmt::arg("dir", dir.string()), fmt::arg("port", port), fmt::arg("cli", BELLOWS_CLI_PATH),
                                        fmt::arg("train", train));
  std::ofstream(dir / "nodes.sh") << script;
  const int status = std::system(("timeout 120 bash '" + (dir / "nodes.sh").string() + "'").c_str());
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status << bellows::testing::slurp(dir / "node0.err");
  ASSERT_EQ(bellows::testing::slurp(dir / "codes"), "0 0\n") << bellows::testing::slurp(dir / "node0.err") << bellows::testing::slurp(dir / "node1.err");
  EXPECT_THAT(bellows::testing::slurp(dir / "node0.out"), HasSubstr("2 processes, gloo (1 on this node)"));
  const CliResult one = run_cli(dist_args(csv, dir, "one", 16, "precision=fp32"));
  ASSERT_EQ(one.code, 0) << one.err;
  EXPECT_LE(dist_max_relative_difference(dist_final_weights(dir / "two"), dist_final_weights(dir / "one")), 1e-5);
}

// `bellows train` started by srun or mpirun: two processes with only SLURM's (or Open MPI's) variables find
// each other and train like one process with twice the batch.
void expect_launcher_detected(const std::string& tag, const std::string& env0, const std::string& env1, const std::string& via) {
  const fs::path dir = bellows::testing::scratch_dir("bellows_dist_" + tag);
  const fs::path csv = dist_write_csv(dir);
  const std::string train = fmt::format("'{}' {}", BELLOWS_CLI_PATH, dist_args(csv, dir, "two", 8, "precision=fp32"));
  const std::string script = fmt::format("cd '{0}'; env {1} {3} >r0.out 2>r0.err & p0=$!; env {2} {3} >r1.out 2>r1.err & p1=$!; "
                                         "wait $p0; r0=$?; wait $p1; echo \"$r0 $?\" > codes",
                                         dir.string(), env0, env1, train);
  std::ofstream(dir / "run.sh") << script << "\n";
  ASSERT_EQ(std::system(("timeout 120 bash '" + (dir / "run.sh").string() + "'").c_str()), 0);
  ASSERT_EQ(bellows::testing::slurp(dir / "codes"), "0 0\n") << bellows::testing::slurp(dir / "r0.err") << bellows::testing::slurp(dir / "r1.err");
  EXPECT_THAT(bellows::testing::slurp(dir / "r0.out"), HasSubstr("rank 0 via " + via));
  const CliResult one = run_cli(dist_args(csv, dir, "one", 16, "precision=fp32"));
  ASSERT_EQ(one.code, 0) << one.err;
  EXPECT_LE(dist_max_relative_difference(dist_final_weights(dir / "two"), dist_final_weights(dir / "one")), 1e-5);
}

TEST(DistCli, SrunAndMpirunEnvironmentsAreDetected) {
  const int job = 40000 + static_cast<int>(getpid() % 9000);  // the port is 10000 + job % 10000
  const std::string slurm = fmt::format("SLURM_NTASKS=2 SLURM_STEP_ID=0 SLURM_JOB_ID={} SLURM_JOB_NODELIST=localhost SLURM_TASKS_PER_NODE=2", job);
  expect_launcher_detected("slurm", slurm + " SLURM_PROCID=0 SLURM_LOCALID=0", slurm + " SLURM_PROCID=1 SLURM_LOCALID=1", "slurm");
  const std::string mpi = fmt::format("OMPI_COMM_WORLD_SIZE=2 OMPI_COMM_WORLD_LOCAL_SIZE=2 MASTER_PORT={}", 20000 + (getpid() + 41) % 20000);
  expect_launcher_detected("mpi", mpi + " OMPI_COMM_WORLD_RANK=0 OMPI_COMM_WORLD_LOCAL_RANK=0",
                           mpi + " OMPI_COMM_WORLD_RANK=1 OMPI_COMM_WORLD_LOCAL_RANK=1", "openmpi");
}

TEST(DistCli, AnEnvironmentThatContradictsItselfOrTheConfigIsAnError) {
  CliResult r = run_cli("train train.max_steps=2", "env RANK=3 WORLD_SIZE=2");
  EXPECT_EQ(r.code, 2);
  EXPECT_THAT(r.err, HasSubstr("rank 3 outside [0, 2)"));
  r = run_cli("train train.max_steps=2 dist.strategy=single", "env RANK=0 WORLD_SIZE=2");
  EXPECT_EQ(r.code, 2);
  EXPECT_THAT(r.err, HasSubstr("dist.strategy is single"));
  EXPECT_THAT(r.err, HasSubstr("names 2 processes"));
  r = run_cli("launch -n 0 -- train");
  EXPECT_EQ(r.code, 2);
  EXPECT_THAT(r.err, HasSubstr("-n/--nproc is 0"));
}

TEST(DistCli, SlurmWritesASubmittableScript) {
  const fs::path dir = bellows::testing::scratch_dir("bellows_dist_sbatch");
  const fs::path csv = dist_write_csv(dir);
  std::ofstream(dir / "run.yaml") << fmt::format("name: job\noutput_dir: {}\ndata: {{source: csv, path: {}, csv: {{targets: [y]}}}}\n"
                                                 "model: {{name: mlp, in_features: 4, hidden: [8], out_features: 1}}\n",
                                                 (dir / "runs").string(), csv.string());
  const CliResult r = run_cli(fmt::format("slurm {} data.batch_size=32 --nodes 2 --gpus-per-node 4 --cpus-per-node 32 --partition gpu "
                                          "--time 04:00:00 -o {}", (dir / "run.yaml").string(), (dir / "job.sbatch").string()));
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("sbatch " + (dir / "job.sbatch").string()));
  const std::string s = bellows::testing::slurp(dir / "job.sbatch");
  EXPECT_THAT(s, HasSubstr("#SBATCH --gres=gpu:4\n"));
  EXPECT_THAT(s, HasSubstr("#SBATCH --cpus-per-task=8\n"));
  EXPECT_THAT(s, HasSubstr(fmt::format("train '{}' resume=auto 'data.batch_size=32'", (dir / "run.yaml").string())));
  EXPECT_TRUE(fs::is_directory(dir / "runs" / "job"));  // SLURM opens --output there before the script runs
  EXPECT_EQ(std::system(("bash -n '" + (dir / "job.sbatch").string() + "'").c_str()), 0);
  // A bad key fails at writing time, not in the queue.
  EXPECT_EQ(run_cli(fmt::format("slurm {} nope.key=1 -o {}", (dir / "run.yaml").string(), (dir / "bad.sbatch").string())).code, 2);
  EXPECT_FALSE(fs::exists(dir / "bad.sbatch"));
}

TEST(DistCli, CtrlCStopsEveryRankAtOneStepAndResumeContinuesExactly) {
  const fs::path dir = bellows::testing::scratch_dir("bellows_dist_resume");
  const fs::path csv = dist_write_csv(dir);
  const int port = 20000 + static_cast<int>((getpid() + 13) % 20000);
  const std::string launch = fmt::format("launch -n 2 --master-port {} -- ", port);
  const std::string extra = "precision=fp32 data.shuffle=true schedule.type=constant schedule.warmup_steps=0 train.eval_every_n_steps=0";
  auto with_steps = [&](const std::string& name, std::int64_t steps, const std::string& more) {
    return launch + dist_args(csv, dir, name, 8, extra + fmt::format(" train.epochs=100000 train.max_steps={} {}", steps, more));
  };
  // SIGINT to the launcher once rank 0 has logged a step: both ranks stop at the same step, rank 0 writes the
  // checkpoint, exit 5.
  const CliResult stopped = bellows::testing::run_cli_signalled_when(with_steps("run", 100000000, ""),
                                                                     [&] { return bellows::testing::has_record(dir / "run" / "metrics.jsonl"); });
  ASSERT_EQ(stopped.code, 5) << stopped.out << stopped.err;
  EXPECT_THAT(stopped.err, HasSubstr("after signal 2"));
  std::int64_t at = -1;
  for (const auto& e : fs::directory_iterator(dir / "run" / "checkpoints")) at = std::max<std::int64_t>(at, std::stoll(e.path().filename().string().substr(5)));
  ASSERT_GT(at, 0);
  // Resumed to 10 steps past the stop, and a run that never stopped, to the same step.
  const CliResult resumed = run_cli(with_steps("run", at + 10, "resume=auto"));
  ASSERT_EQ(resumed.code, 0) << resumed.out << resumed.err;
  EXPECT_THAT(resumed.out, HasSubstr(fmt::format("resumed from")));
  const CliResult straight = run_cli(with_steps("straight", at + 10, ""));
  ASSERT_EQ(straight.code, 0) << straight.out << straight.err;
  EXPECT_EQ(dist_max_relative_difference(dist_final_weights(dir / "run"), dist_final_weights(dir / "straight")), 0.0) << "stopped at " << at;
  // One process goes on from the two-process checkpoint (batch 8, half the global batch), with a warning about the data order.
  const CliResult alone = run_cli(dist_args(csv, dir, "run", 8, extra + fmt::format(" train.epochs=100000 train.max_steps={} resume=auto", at + 15)));
  ASSERT_EQ(alone.code, 0) << alone.out << alone.err;
  EXPECT_THAT(alone.out, HasSubstr("warning: the checkpoint was written by 2 process(es) of batch 8, this run has 1 of batch 8: training continues"));
  EXPECT_THAT(alone.out, HasSubstr(fmt::format("optimizer steps   {}", at + 15)));
}

// Rank 1 is killed with SIGKILL once rank 0 has logged a step; rank 0 must stop by itself with a resource error, well
// inside dist.timeout_s, whatever collective it was in (ddp: a gradient all-reduce; zero2: a gradient reduce or a
// broadcast of the updated shards).
void expect_survivor_stops(const std::string& strategy, int port_offset) {
  const fs::path dir = bellows::testing::scratch_dir("bellows_dist_kill_" + strategy);
  const fs::path csv = dist_write_csv(dir);
  const int port = 20000 + static_cast<int>((getpid() + port_offset) % 20000);
  // fsdp needs a model of blocks: the transformer.
  const std::string args = strategy == "fsdp" ? transformer_args(csv, dir, "kill", "dist.strategy=fsdp train.eval_every_n_steps=0")
                                              : dist_args(csv, dir, "kill", 8, "precision=fp32 dist.strategy=" + strategy);
  const std::string train = fmt::format("'{}' {} train.max_steps=1000000 dist.timeout_s=20", BELLOWS_CLI_PATH, args);
  const std::string script = fmt::format(
      "cd '{0}'; export WORLD_SIZE=2 MASTER_PORT={1}; RANK=0 {2} >r0.out 2>r0.err & p0=$!; RANK=1 {2} >r1.out 2>r1.err & p1=$!; "
      "for i in $(seq 200); do grep -q ' step ' r0.out 2>/dev/null && break; sleep 0.1; done; kill -9 $p1; "
      "start=$(date +%s); wait $p0; echo $? > rc0; echo $(( $(date +%s) - start )) > seconds",
      dir.string(), port, train);
  std::ofstream(dir / "kill.sh") << script << "\n";
  const int status = std::system(("timeout 120 bash '" + (dir / "kill.sh").string() + "'").c_str());
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status;
  EXPECT_EQ(bellows::testing::slurp(dir / "rc0"), "4\n") << strategy;  // a resource error
  EXPECT_LE(std::stoi(bellows::testing::slurp(dir / "seconds")), 20) << strategy;
  const std::string err = bellows::testing::slurp(dir / "r0.err");
  EXPECT_THAT(err, HasSubstr("rank 0 of 2")) << strategy;
  // The collective it was in, named: where the kill lands decides which (a gradient all-reduce or, under zero2, a
  // reduce to an owner or the broadcast of the updated shards; or the meters' all-reduce at a logging step).
  EXPECT_THAT(err, ::testing::ContainsRegex("rank 0 of 2: (gradient all-reduce|gradient reduce to rank [01]|broadcast from rank [01]|"
                                            "all-reduce of (meters|gradient norms)|agreement on stop and checkpoint decisions|"
                                            "gather of unit encoder.layers.[01]'s parameters from rank [01]) failed: "))
      << strategy;
  EXPECT_THAT(err, HasSubstr("(another rank stopped, crashed or hangs; dist.timeout_s is 20)")) << strategy;
}

TEST(DistCli, AKilledRankMakesTheSurvivorExitWithAnError) { expect_survivor_stops("ddp", 7); }

TEST(DistCli, AKilledRankMakesTheSurvivorExitWithAnErrorUnderZero2) { expect_survivor_stops("zero2", 13); }

// Under fsdp every rank writes its shard of each checkpoint and rank 0 the manifest (checkpoint.layout auto: sharded):
// rank 1 killed with SIGKILL while checkpoints are taken every step (so most kills land in a write) stops rank 0 with a
// resource error, every checkpoint left behind is complete (written to a temporary name, renamed when whole), and a
// new job resumes from the newest. tests/reliability/kill_soak.py --ranks 2 kills either rank many times.
TEST(DistCli, AKilledRankDuringFsdpCheckpointsLeavesOnlyCompleteCheckpoints) {
  const fs::path dir = bellows::testing::scratch_dir("bellows_dist_kill_ckpt");
  const fs::path csv = dist_write_csv(dir);
  const int port = 20000 + static_cast<int>((getpid() + 67) % 20000);
  const std::string args = transformer_args(csv, dir, "kill", "dist.strategy=fsdp train.eval_every_n_steps=0 checkpoint.every_n_steps=1");
  const std::string train = fmt::format("'{}' {} train.max_steps=1000000 dist.timeout_s=20", BELLOWS_CLI_PATH, args);
  const std::string script = fmt::format(
      "cd '{0}'; export WORLD_SIZE=2 MASTER_PORT={1}; RANK=0 {2} >r0.out 2>r0.err & p0=$!; RANK=1 {2} >r1.out 2>r1.err & p1=$!; "
      "for i in $(seq 300); do [ $(ls kill/checkpoints 2>/dev/null | grep -c '^step-') -ge 3 ] && break; sleep 0.05; done; kill -9 $p1; "
      "wait $p0; echo $? > rc0",
      dir.string(), port, train);
  std::ofstream(dir / "kill.sh") << script << "\n";
  const int status = std::system(("timeout 120 bash '" + (dir / "kill.sh").string() + "'").c_str());
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status;
  EXPECT_EQ(bellows::testing::slurp(dir / "rc0"), "4\n") << bellows::testing::slurp(dir / "r0.err");
  // Every checkpoint directory under its final name verifies; none was skipped as damaged.
  std::vector<std::string> skipped;
  const std::optional<fs::path> newest = bellows::ckpt::find_latest_valid(dir / "kill" / "checkpoints", &skipped);
  ASSERT_TRUE(newest.has_value());
  EXPECT_TRUE(skipped.empty()) << fmt::format("{}", fmt::join(skipped, "; "));
  const CliResult resumed =
      run_cli(fmt::format("launch -n 2 --master-port {} -- ", port) + args + " resume=auto train.max_steps=" +
              std::to_string(std::stoi(newest->filename().string().substr(5)) + 2));
  ASSERT_EQ(resumed.code, 0) << resumed.out << resumed.err;
  EXPECT_THAT(resumed.out, HasSubstr("resumed from " + newest->string()));
}

// Under fsdp most of a step is spent in or beside the gathers of layers' weights: one of them, most often, names it.
TEST(DistCli, AKilledRankMakesTheSurvivorExitWithAnErrorUnderFsdp) { expect_survivor_stops("fsdp", 61); }

}  // namespace
}  // namespace bellows::testing::dist_cli
