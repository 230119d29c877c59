// `bellows selftest`: every device path of bellows run once on one device, each check with the measurement
// behind its verdict: autocast (op dtypes), the loss scaler's skip and backoff, fused optimizers against the
// reference step, pinned copies overlapping compute, the stager, memory statistics, SDPA's backend, channels_last
// convolution, CUDA-graph replay, all-reduce, determinism. A check that cannot run on this device or build is
// "skipped" with the reason; only a "fail" fails the self-test.
#pragma once

#include <nlohmann/json.hpp>

#include <string>
#include <vector>

namespace bellows::lab {

struct SelftestCheck {
  std::string name;    // "autocast bf16"
  std::string status;  // "pass" | "fail" | "skipped"
  std::string detail;  // the measurement behind a pass or a fail; the reason for a skip
  double seconds = 0;
};

struct SelftestReport {
  std::string device;   // "cpu", "cuda:0"
  std::string machine;  // one line: the CPU or GPU, LibTorch and how bellows was built
  std::vector<SelftestCheck> checks;
  bool passed() const;  // no check failed
};

// `device`: "cpu", "cuda" (the first GPU; with none, or in a build without CUDA, every CUDA check is skipped with
// the reason) or "auto" (cuda when a GPU is usable, else cpu). Anything else is a kUsage error. The process's
// settings (determinism flags, TF32, threads) are as before when it returns.
SelftestReport run_selftest(const std::string& device);

std::string format_selftest(const SelftestReport& report);  // a table, then "N passed, N failed, N skipped"
nlohmann::json selftest_json(const SelftestReport& report);

}  // namespace bellows::lab
