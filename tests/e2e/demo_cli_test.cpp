// The embedded demo takes any model (issue 44): `bellows train model.name=<name>` alone trains every registered
// model two steps on data the demo makes for it, and the plan says so; the TorchScript model with model.path
// alone, on the MLP demo's table. The models come from the registry, so a model added without a demo fails here.
#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>
#include <iostream>
#include <nlohmann/json.hpp>

#include "bellows/models/registry.h"
#include "run_cli.h"
#include "test_paths.h"

namespace {

namespace fs = std::filesystem;
using bellows::testing::CliResult;
using bellows::testing::run_cli;
using bellows::testing::scratch_dir;
using bellows::testing::slurp;

// demo.pt of make_scripted_models.py (a scripted MLP on 64 features -> 1), written once per test process with the
// tests' Python (BELLOWS_PYTHON, which ctest sets).
fs::path scripted_demo_model() {
  static const fs::path file = [] {
    const fs::path dir = scratch_dir("demo_scripted");
    const char* python = std::getenv("BELLOWS_PYTHON");
    const std::string cmd = std::string("'") + (python ? python : "python3") + "' '" + BELLOWS_TEST_SOURCE_DIR +
                            "/e2e/make_scripted_models.py' '" + dir.string() + "' >'" + (dir / "log").string() +
                            "' 2>&1";
    if (std::system(cmd.c_str()) != 0)
      ADD_FAILURE() << "could not write the TorchScript models: " << cmd << "\n" << slurp(dir / "log");
    return dir / "demo.pt";
  }();
  return file;
}

std::vector<std::string> model_names() {
  std::vector<std::string> names;
  for (const auto& entry : bellows::models::registry()) names.push_back(entry.name);
  return names;
}

class DemoCli : public ::testing::TestWithParam<std::string> {};

TEST_P(DemoCli, TrainsTwoStepsFromModelNameAlone) {
  const std::string name = GetParam();
  const bellows::models::ModelEntry& entry = bellows::models::find_model(name);
  ASSERT_FALSE(entry.demo.yaml.empty()) << "model " << name << " has no embedded demo (models::ModelEntry::demo)";
  const fs::path out = scratch_dir("bellows_demo");
  std::string args = "train model.name=" + name + " train.max_steps=2 threads=1 --output-dir '" + out.string() + "'";
  if (name == "torchscript") args += " model.path='" + scripted_demo_model().string() + "'";
  const auto start = std::chrono::steady_clock::now();
  const CliResult r = run_cli(args);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::cout << "bellows " << args << ": " << seconds << " s\n";
  RecordProperty("seconds", std::to_string(seconds));
  ASSERT_EQ(r.code, 0) << r.err << r.out;
  EXPECT_NE(r.out.find("optimizer steps   2"), std::string::npos) << r.out;
  // The printed plan and plan.json say which demo ran, on what data.
  const std::string says = "the embedded demo of model " + name + " trains on " + entry.demo.data;
  EXPECT_NE(r.out.find(says), std::string::npos) << r.out;
  const fs::path run_dir = out / (name == "mlp" ? "demo" : "demo-" + name);
  const nlohmann::json plan = nlohmann::json::parse(slurp(run_dir / "plan.json"));
  bool found = false;
  for (const auto& e : plan["entries"]) {
    if (e["key"] != "demo") continue;
    found = true;
    EXPECT_NE(e["reason"].get<std::string>().find(says), std::string::npos) << e.dump();
  }
  EXPECT_TRUE(found) << plan.dump(2);
  EXPECT_NE(slurp(run_dir / "config.resolved.yaml").find("source: synthetic"), std::string::npos);
}

INSTANTIATE_TEST_SUITE_P(EveryModel, DemoCli, ::testing::ValuesIn(model_names()),
                         [](const ::testing::TestParamInfo<std::string>& info) { return info.param; });

// The scripted model's file is the one key the demo cannot choose: without it the error names it.
TEST(DemoCliErrors, AScriptedModelWithoutItsFileNamesModelPath) {
  const CliResult r = run_cli("train model.name=torchscript train.max_steps=2 threads=1 --output-dir '" +
                              scratch_dir("bellows_demo").string() + "'");
  EXPECT_EQ(r.code, 2) << r.err << r.out;
  EXPECT_NE(r.err.find("model.path"), std::string::npos) << r.err;
}

}  // namespace
