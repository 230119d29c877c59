// Durable atomic writes: the target is replaced whole, no temporary file is left behind on success or failure,
// a failure names the path as a kResource error, and the streamed and path-callback forms behave alike.
#include "bellows/util/atomic_file.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <string>

#include "bellows/util/error.h"
#include "test_util.h"

namespace bellows {
namespace {

namespace fs = std::filesystem;
using test_support::error_from;
using test_support::TempDir;

std::string slurp(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

// The names in `dir`, to see that no temporary file is left.
std::size_t entries(const fs::path& dir) {
  std::size_t n = 0;
  for ([[maybe_unused]] const auto& e : fs::directory_iterator(dir)) ++n;
  return n;
}

TEST(AtomicFile, WritesAndReplacesWholeFiles) {
  const TempDir temp("atomic_file");
  const fs::path p = temp.path() / "plan.json";
  write_file_atomically(p, "first");
  EXPECT_EQ(slurp(p), "first");
  write_file_atomically(p, std::string(1 << 20, 'x'));
  EXPECT_EQ(slurp(p), std::string(1 << 20, 'x'));
  EXPECT_EQ(entries(temp.path()), 1u) << "no temporary file left";
}

TEST(AtomicFile, StreamedWriterCommitsOrLeavesNothing) {
  const TempDir temp("atomic_file");
  const fs::path p = temp.path() / "data.bin";
  {
    AtomicFileWriter w(p);
    w.write("abc");
    w.write("def", 3);
    EXPECT_EQ(w.offset(), 6u);
    EXPECT_TRUE(fs::exists(w.temporary_path()));
    EXPECT_FALSE(fs::exists(p)) << "nothing at the target before commit()";
    w.commit();
  }
  EXPECT_EQ(slurp(p), "abcdef");
  {
    AtomicFileWriter abandoned(p);
    abandoned.write("partial");
  }
  EXPECT_EQ(slurp(p), "abcdef") << "an abandoned writer leaves the target as it was";
  EXPECT_EQ(entries(temp.path()), 1u);
}

TEST(AtomicFile, UnwritableDirectoryIsAResourceErrorNamingThePath) {
  const TempDir temp("atomic_file");
  const fs::path p = temp.path() / "absent" / "x.json";
  const Error e = error_from([&] { write_file_atomically(p, "x"); });
  EXPECT_EQ(e.kind(), ErrorKind::kResource);
  EXPECT_NE(e.message().find((temp.path() / "absent" / "x.json").string()), std::string::npos) << e.message();
  EXPECT_EQ(entries(temp.path()), 0u);
}

TEST(AtomicFile, ViaPathWritesThroughATemporaryName) {
  const TempDir temp("atomic_file");
  const fs::path p = temp.path() / "trace.json";
  write_file_atomically_via(p, [&](const fs::path& tmp) {
    EXPECT_EQ(tmp.parent_path(), p.parent_path());
    EXPECT_NE(tmp, p);
    std::ofstream(tmp) << "{}";
  });
  EXPECT_EQ(slurp(p), "{}");
  EXPECT_THROW(write_file_atomically_via(p,
                                         [](const fs::path& tmp) {
                                           std::ofstream(tmp) << "half";
                                           throw std::runtime_error("the library failed");
                                         }),
               std::runtime_error);
  EXPECT_EQ(slurp(p), "{}") << "a failed writer leaves the target as it was";
  EXPECT_EQ(entries(temp.path()), 1u);
}

TEST(AtomicFile, DirectoryPrimitives) {
  const TempDir temp("atomic_file");
  const fs::path staging = temp.path() / ".tmp-step";
  fs::create_directory(staging);
  write_file_synced(staging / "manifest.json", "{}");
  fsync_file(staging / "manifest.json");
  fsync_directory(staging);
  rename_durably(staging, temp.path() / "step");
  EXPECT_EQ(slurp(temp.path() / "step" / "manifest.json"), "{}");
  EXPECT_FALSE(fs::exists(staging));
  EXPECT_EQ(error_from([&] { fsync_directory(temp.path() / "absent"); }).kind(), ErrorKind::kResource);
  EXPECT_EQ(error_from([&] { rename_durably(temp.path() / "absent", temp.path() / "b"); }).kind(),
            ErrorKind::kResource);
}

}  // namespace
}  // namespace bellows
