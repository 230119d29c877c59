// Read-only files and mappings; see read_only_file.h.
#include "bellows/util/read_only_file.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "bellows/util/check.h"

namespace bellows {
namespace fs = std::filesystem;

FileMapping::~FileMapping() {
  if (base) ::munmap(base, length);
}

ReadOnlyFile::ReadOnlyFile(fs::path path, const std::string& kind) : path_(std::move(path)) {
  fd_ = ::open(path_.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd_ < 0) {
    const int e = errno;
    BELLOWS_CHECK_DATA(e != ENOENT, fmt::format("{}: no such file", path_.string()),
                       fmt::format("check the path (relative paths start at {})", fs::current_path().string()));
    BELLOWS_FAIL(ErrorKind::kData, fmt::format("cannot open {}: {}", path_.string(), std::strerror(e)), "check the file's permissions");
  }
  struct stat st {};
  if (::fstat(fd_, &st) != 0 || S_ISDIR(st.st_mode)) {
    ::close(fd_);
    BELLOWS_FAIL(ErrorKind::kData, fmt::format("{} is a directory, not a file", path_.string()), kind);
  }
  size_ = static_cast<std::uint64_t>(st.st_size);
}

ReadOnlyFile::~ReadOnlyFile() { ::close(fd_); }

void ReadOnlyFile::read(std::uint64_t offset, void* dst, std::uint64_t n) const {
  auto* out = static_cast<char*>(dst);
  while (n > 0) {
    const auto chunk = static_cast<std::size_t>(std::min<std::uint64_t>(n, std::uint64_t{1} << 30));
    const ssize_t got = ::pread(fd_, out, chunk, static_cast<off_t>(offset));
    if (got < 0 && errno == EINTR) continue;
    BELLOWS_CHECK_DATA(got > 0,
                       fmt::format("{}: read failed at byte {}: {}", path_.string(), offset,
                                   got < 0 ? std::strerror(errno) : "unexpected end of file"),
                       "the file may have been truncated while it was being read");
    out += got;
    offset += static_cast<std::uint64_t>(got);
    n -= static_cast<std::uint64_t>(got);
  }
}

std::vector<std::uint8_t> ReadOnlyFile::read(std::uint64_t offset, std::uint64_t n) const {
  std::vector<std::uint8_t> bytes(static_cast<std::size_t>(n));
  read(offset, bytes.data(), n);
  return bytes;
}

std::shared_ptr<const FileMapping> ReadOnlyFile::map(const std::string& hint) const {
  if (mapping_) return mapping_;
  void* base = ::mmap(nullptr, static_cast<std::size_t>(size_), PROT_READ, MAP_PRIVATE, fd_, 0);
  BELLOWS_CHECK_RESOURCE(base != MAP_FAILED,
                         fmt::format("cannot memory-map {} ({} bytes): {}", path_.string(), size_, std::strerror(errno)), hint);
  auto m = std::make_shared<FileMapping>();
  m->base = base;
  m->length = static_cast<std::size_t>(size_);
  mapping_ = m;
  return mapping_;
}

}  // namespace bellows
