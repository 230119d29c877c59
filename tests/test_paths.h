// Paths the test programs need (the test data, the golden files, the sources, the bellows executable), read at run
// time from bellows_test_paths.txt, which the build writes beside the test executables (tests/CMakeLists.txt).
// Compiled in as -D definitions, these absolute paths differed between clones, and a compile line that differs
// cannot be served by ccache to a fresh clone at another path (README.md, "Build times", says what else it took).
#pragma once

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>

namespace bellows_tests {  // not bellows::testing: inside namespace bellows, testing:: must stay GoogleTest's

inline const std::map<std::string, std::string>& test_paths() {
  static const std::map<std::string, std::string> paths = [] {
    std::map<std::string, std::string> m;
    std::error_code ec;
    const std::filesystem::path file = std::filesystem::read_symlink("/proc/self/exe", ec).parent_path() / "bellows_test_paths.txt";
    std::ifstream in(file);
    for (std::string line; std::getline(in, line);) {
      if (const auto eq = line.find('='); eq != std::string::npos) m.emplace(line.substr(0, eq), line.substr(eq + 1));
    }
    if (m.empty()) {
      std::fprintf(stderr, "bellows tests: cannot read %s (the build writes it beside the test programs)\n", file.c_str());
      std::exit(2);
    }
    return m;
  }();
  return paths;
}

// The path named `name` in bellows_test_paths.txt; exits the test program naming it when the file lacks it.
inline const std::string& test_path(const char* name) {
  const auto it = test_paths().find(name);
  if (it == test_paths().end()) {
    std::fprintf(stderr, "bellows tests: bellows_test_paths.txt has no %s\n", name);
    std::exit(2);
  }
  return it->second;
}

}  // namespace bellows_tests

#define BELLOWS_TEST_DATA_DIR (::bellows_tests::test_path("BELLOWS_TEST_DATA_DIR"))
#define BELLOWS_GOLDEN_DIR (::bellows_tests::test_path("BELLOWS_GOLDEN_DIR"))
#define BELLOWS_TEST_SOURCE_DIR (::bellows_tests::test_path("BELLOWS_TEST_SOURCE_DIR"))
#define BELLOWS_SOURCE_DIR (::bellows_tests::test_path("BELLOWS_SOURCE_DIR"))
#define BELLOWS_CLI_PATH (::bellows_tests::test_path("BELLOWS_CLI_PATH"))
