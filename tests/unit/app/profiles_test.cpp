// Hardware profiles (app/profiles.h): auto's choice from constructed hardware reports, every shipped profile valid
// against the schema, the composition order (experiment < profile < file < command line), names, none, paths,
// the command line's choice and the plan row.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "bellows/app/profiles.h"
#include "bellows/app/schema.h"
#include "bellows/util/error.h"

namespace bellows::app {
namespace {
namespace fs = std::filesystem;

hw::HardwareInfo with_gpu(const std::string& name, double gib, int major, int minor) {
  hw::HardwareInfo h;
  h.cuda.compiled = h.cuda.usable = true;
  hw::GpuInfo g;
  g.name = name;
  g.total_memory_bytes = static_cast<std::int64_t>(gib * 1024 * 1024 * 1024);
  g.cc_major = major;
  g.cc_minor = minor;
  g.arch_supported = true;
  h.cuda.gpus.push_back(g);
  return h;
}

fs::path scratch(const std::string& name) {
  const fs::path dir = fs::path(::testing::TempDir()) / (name + "_" + std::to_string(getpid()));
  fs::create_directories(dir);
  return dir;
}

fs::path write(const fs::path& dir, const std::string& name, const std::string& text) {
  std::ofstream(dir / name) << text;
  return dir / name;
}

TEST(Profiles, AutoChoosesByTheFirstUsableGpu) {
  hw::HardwareInfo cpu_only;
  cpu_only.cuda.reason = "no CUDA driver";
  EXPECT_EQ(auto_profile(cpu_only).name, "cpu");
  EXPECT_EQ(auto_profile(cpu_only).reason, "auto: no usable GPU (no CUDA driver)");
  EXPECT_EQ(auto_profile(with_gpu("NVIDIA GeForce RTX 3060", 11.8, 8, 6)).name, "gpu-12gb");
  EXPECT_EQ(auto_profile(with_gpu("NVIDIA GeForce RTX 4090", 23.6, 8, 9)).name, "gpu-24gb");
  EXPECT_EQ(auto_profile(with_gpu("Tesla V100-SXM2-32GB", 31.7, 7, 0)).name, "gpu-24gb");
  EXPECT_EQ(auto_profile(with_gpu("NVIDIA A100-SXM4-40GB", 39.4, 8, 0)).name, "gpu-48gb");
  EXPECT_EQ(auto_profile(with_gpu("NVIDIA A100-SXM4-80GB", 79.2, 8, 0)).name, "gpu-80gb");
  const ProfileSelection h100 = auto_profile(with_gpu("NVIDIA H100 80GB HBM3", 79.2, 9, 0));
  EXPECT_EQ(h100.name, "hopper");
  EXPECT_EQ(h100.reason, "auto: GPU 0, NVIDIA H100 80GB HBM3 with 79.2 GiB, compute capability 9.0: compute capability 9.0 or newer");
  EXPECT_EQ(auto_profile(with_gpu("NVIDIA H200", 139.8, 9, 0)).name, "hopper");
  // A GPU LibTorch has no kernels for does not count.
  hw::HardwareInfo old = with_gpu("Tesla K80", 11.2, 3, 7);
  old.cuda.gpus[0].arch_supported = false;
  EXPECT_EQ(auto_profile(old).name, "cpu");
}

TEST(Profiles, EveryShippedProfileIsAValidRunConfigAndNamesEveryKeysReason) {
  const std::vector<std::string> names = profile_names();
  EXPECT_EQ(names, (std::vector<std::string>{"cpu", "gpu-12gb", "gpu-24gb", "gpu-48gb", "gpu-80gb", "hopper"}));
  for (const auto& name : names) {
    const fs::path file = profiles_dir() / (name + ".yaml");
    config::Config c = config::Config::load(file);
    EXPECT_FALSE(c.leaf_keys().empty()) << name;
    EXPECT_NO_THROW(validate_run_config(c)) << name;
    // Each key's line carries its comment (the "why").
    std::ifstream in(file);
    std::string line;
    int keys = 0, commented = 0;
    while (std::getline(in, line)) {
      const auto first = line.find_first_not_of(' ');
      if (first == std::string::npos || line[first] == '#') continue;  // blank, or a comment line
      const auto colon = line.find(':');
      const auto hash = line.find('#');
      const std::string value = line.substr(colon + 1, hash == std::string::npos ? std::string::npos : hash - colon - 1);
      if (value.find_first_not_of(' ') == std::string::npos) continue;  // a map's name (data:, train:)
      ++keys;
      if (hash != std::string::npos) ++commented;
    }
    EXPECT_GT(keys, 3) << name;
    EXPECT_EQ(commented, keys) << name << ": every key needs a comment saying why";
  }
}

TEST(Profiles, TheDefaultIsAutoBelowEveryKeyAndThePlanSaysWhy) {
  const hw::HardwareInfo& hw = hw::HardwareInfo::get();
  const ProfileSelection expected = auto_profile(hw);
  const config::Config c = resolve_config(std::nullopt, {"data.prefetch=2"});
  ASSERT_TRUE(c.hardware_profile());
  EXPECT_EQ(c.hardware_profile()->value, "auto");
  EXPECT_EQ(c.hardware_profile()->file.stem().string(), expected.name);
  EXPECT_EQ(c.node("data.prefetch").as<int>(), 2);  // the command line over the profile
  EXPECT_EQ(c.node("data.batch_size").as<int>(), 256);  // the demo's own key
  EXPECT_NE(c.origin("train.oom_recovery").str().find(expected.name + ".yaml"), std::string::npos) << c.origin("train.oom_recovery").str();
  EXPECT_EQ(c.sources().front(), c.hardware_profile()->file.string());
  const plan::PlanEntry row = profile_plan_entry(c, hw);
  EXPECT_EQ(row.key, "profile");
  EXPECT_EQ(row.value, expected.name);
  EXPECT_EQ(row.reason, expected.reason);
}

TEST(Profiles, ANamedProfileComposesBetweenTheExperimentAndTheFile) {
  const fs::path dir = scratch("profiles_named");
  write(dir, "experiment.yaml", "data:\n  prefetch: 3\n  workers: 1\ntrain:\n  epochs: 2\n");
  const fs::path run = write(dir, "run.yaml", "experiment: experiment.yaml\nhardware_profile: gpu-48gb\ndata:\n  workers: 0\n");
  const config::Config c = resolve_config(run, {});
  EXPECT_EQ(c.node("data.prefetch").as<int>(), 8);  // the profile over the experiment
  EXPECT_EQ(c.node("data.workers").as<int>(), 0);   // the file over the profile
  EXPECT_EQ(c.node("train.epochs").as<int>(), 2);   // the experiment where the profile is silent
  ASSERT_TRUE(c.hardware_profile());
  EXPECT_EQ(c.hardware_profile()->value, "gpu-48gb");
  const plan::PlanEntry row = profile_plan_entry(c, hw::HardwareInfo::get());
  EXPECT_EQ(row.value, "gpu-48gb");
  EXPECT_NE(row.reason.find("requested (" + (dir / "run.yaml").lexically_normal().string() + ":2:1)"), std::string::npos) << row.reason;
  // The command line's choice replaces the file's.
  const config::Config forced = resolve_config(run, {"--hardware-profile", "gpu-12gb"});
  EXPECT_EQ(forced.node("data.prefetch").as<int>(), 4);
  EXPECT_EQ(forced.hardware_profile()->value, "gpu-12gb");
  EXPECT_EQ(profile_plan_entry(forced, hw::HardwareInfo::get()).reason, "requested (command line 'hardware_profile=gpu-12gb')");
  // none composes nothing: the experiment's value stands.
  const config::Config none = resolve_config(run, {"hardware_profile=none"});
  EXPECT_EQ(none.node("data.prefetch").as<int>(), 3);
  EXPECT_EQ(profile_plan_entry(none, hw::HardwareInfo::get()).value, "none");
  // A path is a file of one's own, relative to the naming file.
  write(dir, "mine.yaml", "data:\n  prefetch: 5\n");
  const fs::path own = write(dir, "own.yaml", "hardware_profile: ./mine.yaml\n");
  EXPECT_EQ(resolve_config(own, {}).node("data.prefetch").as<int>(), 5);
  fs::remove_all(dir);
}

TEST(Profiles, AnUnknownNameIsAConfigErrorListingTheShippedOnes) {
  const fs::path dir = scratch("profiles_unknown");
  const fs::path run = write(dir, "run.yaml", "hardware_profile: gpu-16gb\n");
  try {
    resolve_config(run, {});
    ADD_FAILURE() << "an unknown profile was accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kConfig);
    EXPECT_NE(e.message().find("run.yaml:1:1: hardware_profile 'gpu-16gb' is not a shipped profile"), std::string::npos) << e.message();
    EXPECT_NE(e.hint().find("cpu, gpu-12gb, gpu-24gb, gpu-48gb, gpu-80gb, hopper"), std::string::npos) << e.hint();
  }
  try {
    resolve_config(std::nullopt, {"hardware_profile=tpu"});
    ADD_FAILURE() << "an unknown profile was accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kConfig);
    EXPECT_NE(e.message().find("command line: hardware_profile 'tpu' is not a shipped profile"), std::string::npos) << e.message();
  }
  // Config::load without a resolver (a config built in code) accepts only paths.
  try {
    config::Config::load(run);
    ADD_FAILURE() << "a profile name was accepted without a resolver";
  } catch (const Error& e) {
    EXPECT_NE(e.message().find("names a shipped profile"), std::string::npos) << e.message();
  }
  fs::remove_all(dir);
}

}  // namespace
}  // namespace bellows::app
