// End-to-end: runs the built `bellows` executable and checks its output and exit codes.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "bellows/app/schema.h"
#include "bellows/hw/hardware_info.h"
#include "bellows/models/registry.h"
#include "run_cli.h"

namespace {

using Result = bellows::testing::CliResult;
using bellows::testing::run_cli;

Result run_bellows(const std::string& args) { return run_cli(args); }

TEST(Cli, NoArgumentsListsSubcommands) {
  const Result r = run_bellows("");
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("hw"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("Exit codes"), std::string::npos) << r.out;
}

TEST(Cli, HelpListsSubcommands) {
  const Result r = run_bellows("--help");
  EXPECT_EQ(r.code, 0);
  EXPECT_NE(r.out.find("hw"), std::string::npos);
  EXPECT_NE(r.out.find("Report the CPU"), std::string::npos);
}

// What `train --help` and `config keys` say is every flag and every key there is (README, docs/training.md).
TEST(Cli, TrainHelpAndConfigKeysNameEveryFlagAndKey) {
  const bellows::config::Schema schema = bellows::app::run_schema("mlp");
  const Result help = run_bellows("train --help");
  ASSERT_EQ(help.code, 0) << help.err;
  for (const auto& [flag, key] : schema.aliases()) {
    EXPECT_NE(help.out.find(flag + " "), std::string::npos) << flag << " missing from\n" << help.out;
    EXPECT_NE(help.out.find(key), std::string::npos) << key << " missing from\n" << help.out;
  }
  for (const char* flag : {"--plan FILE|auto", "--hardware-profile NAME", "--profile ", "bellows config keys"}) {
    EXPECT_NE(help.out.find(flag), std::string::npos) << flag << " missing from\n" << help.out;
  }
  const Result keys = run_bellows("config keys");
  ASSERT_EQ(keys.code, 0) << keys.err;
  for (const auto& [key, spec] : schema.keys()) {
    EXPECT_NE(keys.out.find("\n" + key + " ("), std::string::npos) << key << " missing from config keys";
  }
  EXPECT_EQ(keys.out.rfind("experiment (string)\n", 0), 0u) << keys.out.substr(0, 300);
  EXPECT_NE(keys.out.find("\nhardware_profile (string) = auto {auto|none|cpu|"), std::string::npos);
  EXPECT_NE(keys.out.find("|a file path} flag --hardware-profile\n"), std::string::npos);
  EXPECT_NE(keys.out.find("Flags that are not keys: --hardware-profile NAME"), std::string::npos);
}

// A command that reads a run config shows it in its usage line (CLI11 alone wrote "bellows train [OPTIONS]"), and
// its help names every registered model and the command that lists the keys.
TEST(Cli, ConfigCommandsHelpShowsTheConfigFileOverridesAndModels) {
  const std::vector<std::pair<std::string, std::string>> usage = {
      {"train", "Usage: bellows train [CONFIG.yaml] [key=value ...] [OPTIONS]\n"},
      {"plan", "Usage: bellows plan [CONFIG.yaml] [key=value ...] [OPTIONS]\n"},
      {"doctor", "Usage: bellows doctor [CONFIG.yaml] [key=value ...] [OPTIONS]\n"},
      {"cv", "Usage: bellows cv [CONFIG.yaml] [key=value ...] [OPTIONS]\n"},
      {"bench",
       "Usage: bellows bench [CONFIG.yaml] [key=value ...] --matrix [OPTIONS]\n"
       "       bellows bench data [CONFIG.yaml] [key=value ...] [OPTIONS]\n"},
      {"bench data", "Usage: bellows bench data [CONFIG.yaml] [key=value ...] [OPTIONS]\n"},
      {"config show", "Usage: bellows config show [CONFIG.yaml] [key=value ...]\n"},
      {"slurm", "Usage: bellows slurm CONFIG.yaml [key=value ...] [OPTIONS]\n"},
      {"launch", "Usage: bellows launch [OPTIONS] -- train [CONFIG.yaml] [key=value ...]\n"},
  };
  const auto models = bellows::models::registry();
  ASSERT_GE(models.size(), 2u);
  for (const auto& [command, line] : usage) {
    const Result help = run_bellows(command + " --help");
    ASSERT_EQ(help.code, 0) << command << ": " << help.err;
    EXPECT_NE(help.out.find(line), std::string::npos) << line << " missing from\n" << help.out;
    EXPECT_EQ(help.out.find("Usage: bellows " + command + " [OPTIONS]\n"), std::string::npos) << help.out;
    EXPECT_NE(help.out.find("Models (model.name=NAME):"), std::string::npos) << command << ":\n" << help.out;
    for (const auto& model : models) {
      EXPECT_NE(help.out.find("\n  " + model.name + " "), std::string::npos)
          << model.name << " missing from " << command << " --help";
    }
    EXPECT_NE(help.out.find("bellows config keys lists every key"), std::string::npos) << help.out;
    EXPECT_NE(help.out.find("bellows config keys --model NAME"), std::string::npos) << help.out;
    EXPECT_NE(help.out.find("Exit codes:"), std::string::npos) << command << ":\n" << help.out;
  }
}

TEST(Cli, Version) {
  const Result r = run_bellows("--version");
  EXPECT_EQ(r.code, 0);
  EXPECT_NE(r.out.find("bellows " BELLOWS_EXPECTED_VERSION), std::string::npos) << r.out;
}

TEST(Cli, UnknownSubcommandSuggestsAndExits2) {
  const Result r = run_bellows("hx");
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find("unknown command 'hx'; did you mean 'hw'?"), std::string::npos) << r.err;
  EXPECT_EQ(r.out, "");
}

TEST(Cli, UnknownSubcommandWithoutCloseMatch) {
  const Result r = run_bellows("frobnicate");
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find("unknown command 'frobnicate'"), std::string::npos) << r.err;
  EXPECT_EQ(r.err.find("did you mean"), std::string::npos) << r.err;
}

TEST(Cli, UnknownFlagSuggestsAndExits2) {
  const Result r = run_bellows("hw --jsn");
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find("unknown option '--jsn' for 'bellows hw'; did you mean '--json'?"), std::string::npos) << r.err;
  const Result top = run_bellows("--verison");
  EXPECT_EQ(top.code, 2);
  EXPECT_NE(top.err.find("did you mean '--version'?"), std::string::npos) << top.err;
}

TEST(Cli, BadOptionValueExits2) {
  const Result r = run_bellows("hw --measure --matmul-size 3");
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find("matmul-size"), std::string::npos) << r.err;
}

TEST(Cli, HwTextNamesTheMachine) {
  const Result r = run_bellows("hw");
  EXPECT_EQ(r.code, 0) << r.err;
  const auto& info = bellows::hw::HardwareInfo::get();
  EXPECT_NE(r.out.find(info.cpu.model_name), std::string::npos);
  EXPECT_NE(r.out.find("Recommendations"), std::string::npos);
  if (!info.cuda.usable) EXPECT_NE(r.out.find("runs on the CPU"), std::string::npos);
}

TEST(Cli, HwJsonAgreesWithInProcessProbe) {
  const Result r = run_bellows("hw --json");
  ASSERT_EQ(r.code, 0) << r.err;
  const auto doc = nlohmann::json::parse(r.out);
  const auto& info = bellows::hw::HardwareInfo::get();
  EXPECT_EQ(doc["cpu"]["logical_cores"], info.cpu.logical_cores);
  EXPECT_EQ(doc["cpu"]["physical_cores"], info.cpu.physical_cores);
  EXPECT_EQ(doc["memory"]["total_bytes"], info.memory.total_bytes);
  EXPECT_EQ(doc["torch"]["version"], info.torch.version);
  EXPECT_EQ(doc["cuda"]["usable"], info.cuda.usable);
  EXPECT_EQ(doc["cuda"]["reason"], info.cuda.reason);
}

TEST(Cli, HwMeasureReportsPeaksWithMethods) {
  const Result r = run_bellows("hw --json --measure --matmul-size 128 --seconds 0.05");
  ASSERT_EQ(r.code, 0) << r.err;
  const auto doc = nlohmann::json::parse(r.out);
  ASSERT_GE(doc["peaks"].size(), 3u);
  for (const auto& p : doc["peaks"]) {
    EXPECT_FALSE(p["method"].get<std::string>().empty());
    // A figure the hardware has no units for (bf16 on a CPU without AVX512_BF16/AMX) is not timed: 0, said so.
    if (p["supported"].get<bool>()) EXPECT_GT(p["value"].get<double>(), 0.0) << p["name"];
    else EXPECT_NE(p["method"].get<std::string>().find("no hardware support"), std::string::npos);
  }
}

}  // namespace
