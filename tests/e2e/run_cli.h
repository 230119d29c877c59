// Runs the built `bellows` executable (its path from test_paths.h: BELLOWS_CLI_PATH) with its output captured.
// ctest runs tests in parallel processes, so capture files are named after the process and call.
#pragma once

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <sstream>
#include <string>
#include <thread>
#include "test_paths.h"

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
  // Fresh: an earlier run's process with the same pid left its files here (a test that expects no checkpoint found one).
  std::filesystem::remove_all(dir);
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

// Runs `bellows args` in the background, waits until `ready()` holds (checked every 10 ms; a condition such as
// "metrics.jsonl has a step record", never a fixed time, so a loaded machine only makes it slower), then sends
// `signal` and waits for the exit. A process that exits before it is ready is returned as it ended; one that is
// not ready within `limit_s` gets the signal anyway and the test fails.
// `env` (e.g. "TMPDIR=/x") is set for the process.
inline CliResult run_cli_signalled_when(const std::string& args, const std::function<bool()>& ready, int signal = SIGINT,
                                        double limit_s = 300, const std::string& env = "") {
  const auto dir = scratch_dir("bellows_cli");
  const auto out = dir / "out", err = dir / "err";
  const std::string cmd = "exec " + (env.empty() ? std::string() : "env " + env + " ") + "'" + std::string(BELLOWS_CLI_PATH) + "' " + args +
                          " >'" + out.string() + "' 2>'" + err.string() + "' </dev/null";
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::execl("/bin/sh", "sh", "-c", cmd.c_str(), static_cast<char*>(nullptr));
    ::_exit(127);
  }
  CliResult r;
  int status = 0;
  bool exited = false;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(limit_s);
  while (!(exited = ::waitpid(pid, &status, WNOHANG) == pid)) {
    if (ready()) break;
    if (std::chrono::steady_clock::now() > deadline) {
      ADD_FAILURE() << "bellows " << args << ": not ready after " << limit_s << " s; signalled anyway";
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  if (!exited) {
    ::kill(pid, signal);
    ::waitpid(pid, &status, 0);
  }
  r.code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  r.out = slurp(out);
  r.err = slurp(err);
  std::filesystem::remove_all(dir);
  return r;
}

// Whether a metrics.jsonl file exists and holds a record of this type ("train": a logged step; "eval", ...).
inline bool has_record(const std::filesystem::path& metrics, const std::string& type = "train") {
  std::ifstream in(metrics);
  std::string line;
  const std::string key = "\"type\":\"" + type + "\"", spaced = "\"type\": \"" + type + "\"";
  while (std::getline(in, line)) {
    if (line.find(key) != std::string::npos || line.find(spaced) != std::string::npos) return true;
  }
  return false;
}

}  // namespace bellows::testing
