// Helpers shared by the unit tests.
#pragma once

#include <ATen/core/Tensor.h>
#include <gtest/gtest.h>

#include <unistd.h>

#include <atomic>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <string>
#include <vector>

#include "bellows/util/error.h"

namespace bellows::test_support {

// The bellows::Error that `fn` throws; a test failure when it throws none.
inline Error error_from(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const Error& e) {
    return e;
  }
  ADD_FAILURE() << "expected a bellows::Error, none was thrown";
  return Error(ErrorKind::kInternal, "<no error>", "");
}

// The values of a float32 tensor, in order.
inline std::vector<float> floats(const at::Tensor& t) {
  EXPECT_EQ(t.scalar_type(), at::kFloat);
  const at::Tensor c = t.contiguous();
  return {c.data_ptr<float>(), c.data_ptr<float>() + c.numel()};
}

// The file mapped at `p` in this process, from /proc/self/maps; empty when `p` is not in a file mapping.
inline std::string mapped_file_at(const void* p) {
  std::ifstream maps("/proc/self/maps");
  std::string line;
  const auto addr = reinterpret_cast<std::uintptr_t>(p);
  while (std::getline(maps, line)) {
    std::uintptr_t lo = 0, hi = 0;
    if (std::sscanf(line.c_str(), "%lx-%lx", &lo, &hi) != 2 || addr < lo || addr >= hi) continue;
    const auto slash = line.find('/');
    return slash == std::string::npos ? "" : line.substr(slash);
  }
  return "";
}

// A folder under the system's temporary directory (bellows_<name>_<pid>_<n>), removed with everything in it
// at the end of the test.
class TempDir {
 public:
  explicit TempDir(const std::string& name = "test") {
    static std::atomic<int> counter{0};
    path_ = std::filesystem::temp_directory_path() /
            ("bellows_" + name + "_" + std::to_string(::getpid()) + "_" + std::to_string(counter++));
    std::filesystem::remove_all(path_);
    std::filesystem::create_directories(path_);
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::filesystem::path& path() const { return path_; }

 private:
  std::filesystem::path path_;
};

}  // namespace bellows::test_support
