// The main() of the GoogleTest programs (unit, end-to-end, C API): every file a test writes lands in one directory of
// this process, removed when the tests pass.
//
// Tests write scratch files under ::testing::TempDir() or std::filesystem::temp_directory_path(), and the programs
// they start (bellows itself, launched ranks) write under TMPDIR. Removing each test's files in each test would take a
// guard at some 100 call sites; without one, a run of the README's test command left about 290 entries in /tmp. Here
// TMPDIR and TEST_TMPDIR (which GoogleTest's TempDir() reads first) name a fresh directory under the one they named
// before (/tmp by default); the programs started inherit it. When a test failed the directory is kept, and its path
// printed, for a look at what the test left; BELLOWS_KEEP_TEST_FILES=1 keeps it always.
#include <gtest/gtest.h>
#include <stdlib.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <string>
#include <system_error>

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  namespace fs = std::filesystem;
  std::string pattern = (fs::temp_directory_path() / "bellows-tests-XXXXXX").string();
  if (::mkdtemp(pattern.data()) == nullptr) {
    std::fprintf(stderr, "cannot make a directory for the tests' files (%s): %s\n", pattern.c_str(), std::strerror(errno));
    return 2;
  }
  const std::string dir = pattern;
  ::setenv("TMPDIR", dir.c_str(), 1);
  ::setenv("TEST_TMPDIR", dir.c_str(), 1);
  const int rc = RUN_ALL_TESTS();
  const char* keep = std::getenv("BELLOWS_KEEP_TEST_FILES");
  if (rc != 0 || (keep != nullptr && std::string(keep) == "1")) {
    std::fprintf(stderr, "the tests' files are kept in %s\n", dir.c_str());
  } else {
    std::error_code ec;
    fs::remove_all(dir, ec);
    if (ec) std::fprintf(stderr, "cannot remove the tests' files in %s: %s\n", dir.c_str(), ec.message().c_str());
  }
  return rc;
}
