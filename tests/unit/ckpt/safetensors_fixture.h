// The safetensors tests' shared pieces (safetensors_test.cpp, safetensors_corrupt_test.cpp): files assembled by hand,
// and a fixture with a scratch directory of its own that checks every reader's refusal of a file.
#pragma once

#include <fmt/format.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdint>
#include <filesystem>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "bellows/ckpt/safetensors.h"
#include "bellows/util/error.h"
#include "file_bytes.h"
#include "test_util.h"

// A namespace of its own: the unit tests are compiled as a unity build, beside other files' helpers.
namespace bellows::ckpt::safetensors_fixture {

namespace fs = std::filesystem;

// `v` as 8 little-endian bytes (the header length at the start of a file).
inline std::string le64(std::uint64_t v) {
  std::string s;
  for (int i = 0; i < 8; ++i) s.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
  return s;
}

// A file by hand: the length of `header` as is (no padding), the header, the data.
inline std::string assemble(const std::string& header, const std::string& data) {
  return le64(header.size()) + header + data;
}

class SafetensorsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    dir_ = fs::temp_directory_path() /
           fmt::format("bellows_safetensors_{}_{}_{}", ::getpid(), info->test_suite_name(), info->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  // Every reader (header alone, read, mapped) refuses `bytes` with a kData error whose message names the file
  // and holds each of `parts`.
  void expect_refused(const std::string& bytes, const std::vector<std::string>& parts) {
    const fs::path p = dir_ / "bad.safetensors";
    test_support::spit(p, bytes);
    const std::vector<std::pair<const char*, std::function<void()>>> readers = {
        {"header", [&] { read_safetensors_header(p); }},
        {"read", [&] { read_safetensors(p, nullptr, false); }},
        {"mmap", [&] { read_safetensors(p, nullptr, true); }},
    };
    for (const auto& [reader, fn] : readers) {
      const Error e = test_support::error_from(fn);
      EXPECT_EQ(e.kind(), ErrorKind::kData) << reader << ": " << e.message();
      EXPECT_NE(e.message().find(p.string() + ": "), std::string::npos) << reader << ": " << e.message();
      for (const auto& part : parts)
        EXPECT_NE(e.message().find(part), std::string::npos) << reader << ": " << e.message();
    }
  }

  fs::path dir_;
};

}  // namespace bellows::ckpt::safetensors_fixture
