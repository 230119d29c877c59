// Runs the built `bellows` executable (path compiled in as BELLOWS_CLI_PATH) with its output captured.
// ctest runs tests in parallel processes, so capture files are named after the process and call.
#pragma once

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

namespace bellows::testing {

struct CliResult {
  int code = -1;
  std::string out, err;
};

inline std::string slurp(const std::filesystem::path& p) {
  std::ifstream in(p);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

// A fresh scratch directory under the test temp dir.
inline std::filesystem::path scratch_dir(const std::string& tag) {
  static int n = 0;
  const auto dir = std::filesystem::path(::testing::TempDir()) / (tag + "_" + std::to_string(getpid()) + "_" + std::to_string(++n));
  std::filesystem::create_directories(dir);
  return dir;
}

// `prefix` wraps the command (e.g. "timeout -s INT --preserve-status 3").
inline CliResult run_cli(const std::string& args, const std::string& prefix = "") {
  const auto dir = scratch_dir("bellows_cli");
  const auto out = dir / "out", err = dir / "err";
  const std::string cmd = prefix + " '" + BELLOWS_CLI_PATH + "' " + args + " >'" + out.string() + "' 2>'" + err.string() + "' </dev/null";
  const int status = std::system(cmd.c_str());
  CliResult r;
  r.code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  r.out = slurp(out);
  r.err = slurp(err);
  std::filesystem::remove_all(dir);
  return r;
}

}  // namespace bellows::testing
