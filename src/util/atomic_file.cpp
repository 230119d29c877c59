// Durable, atomic file writes with POSIX calls (open, write, fsync, rename); see atomic_file.h. The fsyncs are
// what make the rename safe: without the file's, a crash can leave the new name over a hole; without the
// directory's, the rename itself can be lost.
#include "bellows/util/atomic_file.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/types.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdio>  // rename
#include <cstring>
#include <string>
#include <system_error>

#include "bellows/util/check.h"

namespace bellows {
namespace fs = std::filesystem;

namespace {

constexpr const char* kWriteHint = "check free disk space and that the directory exists and is writable";
constexpr std::uint64_t kMaxChunk = std::uint64_t{1} << 30;  // bytes per write(2) call

// "<path>.tmp-<pid>-<n>": unique per process and call, so concurrent writers of one target (threads, ranks)
// never share a temporary file.
fs::path temporary_beside(const fs::path& path) {
  static std::atomic<std::uint64_t> counter{0};
  fs::path tmp = path;
  tmp += fmt::format(".tmp-{}-{}", static_cast<long>(::getpid()), counter.fetch_add(1));
  return tmp;
}

fs::path directory_of(const fs::path& path) {
  const fs::path parent = path.parent_path();
  return parent.empty() ? fs::path(".") : parent;
}

// fsync(2); a filesystem that cannot sync (EINVAL) counts as synced.
bool sync_fd(int fd) {
  return ::fsync(fd) == 0 || errno == EINVAL;
}

// All n bytes at the file position; false with errno set when they cannot be written.
bool write_all(int fd, const void* data, std::uint64_t n) {
  const auto* p = static_cast<const char*>(data);
  while (n > 0) {
    const ssize_t put = ::write(fd, p, static_cast<std::size_t>(std::min(n, kMaxChunk)));
    if (put < 0 && errno == EINTR) continue;
    if (put <= 0) {
      if (put == 0) errno = EIO;
      return false;
    }
    p += put;
    n -= static_cast<std::uint64_t>(put);
  }
  return true;
}

[[noreturn]] void resource_error(const std::string& what, int error, const char* hint = kWriteHint) {
  BELLOWS_FAIL(ErrorKind::kResource, fmt::format("{}: {}", what, std::strerror(error)), hint);
}

void rename_or_fail(const fs::path& from, const fs::path& to) {
  if (::rename(from.c_str(), to.c_str()) != 0) {
    const int error = errno;
    resource_error(fmt::format("cannot rename {} to {}", from.string(), to.string()), error,
                   "check that the directory is writable");
  }
}

}  // namespace

// --- the streamed writer ---

AtomicFileWriter::AtomicFileWriter(fs::path path) : path_(std::move(path)), tmp_(temporary_beside(path_)) {
  fd_ = ::open(tmp_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0666);
  if (fd_ < 0) {
    const int error = errno;
    resource_error(fmt::format("cannot create {} (to become {})", tmp_.string(), path_.string()), error);
  }
}

AtomicFileWriter::~AtomicFileWriter() {
  abandon();
}

void AtomicFileWriter::abandon() noexcept {
  if (fd_ >= 0) {
    ::close(fd_);
    fd_ = -1;
  }
  if (!committed_) ::unlink(tmp_.c_str());  // harmless when already removed
}

void AtomicFileWriter::fail(const char* what, int error) {
  abandon();
  committed_ = true;  // nothing left to remove
  resource_error(fmt::format("{} {} (to become {})", what, tmp_.string(), path_.string()), error);
}

void AtomicFileWriter::write(const void* data, std::uint64_t n) {
  BELLOWS_CHECK(fd_ >= 0, fmt::format("{}: write after commit()", path_.string()), "report this bug");
  if (!write_all(fd_, data, n)) fail("cannot write", errno);
  offset_ += n;
}

void AtomicFileWriter::commit() {
  BELLOWS_CHECK(fd_ >= 0, fmt::format("{}: commit() twice", path_.string()), "report this bug");
  if (!sync_fd(fd_)) fail("cannot fsync", errno);
  const int rc = ::close(fd_);
  fd_ = -1;
  if (rc != 0) fail("cannot close", errno);
  if (::rename(tmp_.c_str(), path_.c_str()) != 0) {
    const int e = errno;
    abandon();
    committed_ = true;
    resource_error(fmt::format("cannot rename {} to {}", tmp_.string(), path_.string()), e,
                   "check that the directory is writable");
  }
  committed_ = true;
  fsync_directory(directory_of(path_));
}

// --- whole files ---

void write_file_atomically(const fs::path& path, std::string_view bytes) {
  AtomicFileWriter w(path);
  w.write(bytes);
  w.commit();
}

void write_file_atomically_via(const fs::path& path, const std::function<void(const fs::path& temporary)>& write) {
  const fs::path tmp = temporary_beside(path);
  try {
    write(tmp);
    fsync_file(tmp);
    rename_or_fail(tmp, path);
  } catch (...) {
    std::error_code ignored;
    fs::remove(tmp, ignored);
    throw;
  }
  fsync_directory(directory_of(path));
}

// --- primitives ---

void write_file_synced(const fs::path& path, std::string_view bytes) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0666);
  if (fd < 0) {
    const int error = errno;
    resource_error(fmt::format("cannot create {}", path.string()), error);
  }
  bool ok = write_all(fd, bytes.data(), bytes.size()) && sync_fd(fd);
  int error = errno;
  if (::close(fd) != 0 && ok) {
    ok = false;
    error = errno;
  }
  if (!ok) resource_error(fmt::format("writing {} ({} bytes) failed", path.string(), bytes.size()), error);
}

void fsync_file(const fs::path& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    const int error = errno;
    resource_error(fmt::format("cannot open {} to sync it", path.string()), error);
  }
  const bool synced = sync_fd(fd);
  const int error = errno;
  ::close(fd);
  if (!synced) resource_error(fmt::format("fsync of {} failed", path.string()), error, "check the disk");
}

void fsync_directory(const fs::path& dir) {
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) {
    const int error = errno;
    resource_error(fmt::format("cannot open directory {} to sync it", dir.string()), error,
                   "check the directory's permissions");
  }
  const bool synced = sync_fd(fd);
  const int error = errno;
  ::close(fd);
  if (!synced) resource_error(fmt::format("fsync of directory {} failed", dir.string()), error, "check the disk");
}

void rename_durably(const fs::path& from, const fs::path& to) {
  rename_or_fail(from, to);
  const fs::path to_dir = directory_of(to), from_dir = directory_of(from);
  fsync_directory(to_dir);
  if (from_dir.lexically_normal() != to_dir.lexically_normal()) fsync_directory(from_dir);
}

}  // namespace bellows
