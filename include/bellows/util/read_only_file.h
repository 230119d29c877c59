// A file opened for reading by offset (pread), and mapped read-only on request: what the NPY/NPZ and
// safetensors readers share. Errors are kData and name the file; mapping failures are kResource.
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

namespace bellows {

// A read-only (PROT_READ, MAP_PRIVATE) mapping of a whole file; unmapped with the last reference. Tensors
// viewing it hold a reference, so the memory outlives the file object.
struct FileMapping {
  void* base = nullptr;
  std::size_t length = 0;
  FileMapping() = default;
  FileMapping(const FileMapping&) = delete;
  FileMapping& operator=(const FileMapping&) = delete;
  ~FileMapping();
};

class ReadOnlyFile {
 public:
  // `kind` completes the hint when the path is a directory: "name the .npy or .npz file".
  ReadOnlyFile(std::filesystem::path path, const std::string& kind);
  ReadOnlyFile(const ReadOnlyFile&) = delete;
  ReadOnlyFile& operator=(const ReadOnlyFile&) = delete;
  ~ReadOnlyFile();

  const std::filesystem::path& path() const { return path_; }
  std::uint64_t size() const { return size_; }

  // Exactly n bytes at offset (callers check that they lie inside the file); a short read is a kData error.
  void read(std::uint64_t offset, void* dst, std::uint64_t n) const;
  std::vector<std::uint8_t> read(std::uint64_t offset, std::uint64_t n) const;

  // The whole file, mapped once; `hint` says what to do when mapping fails.
  std::shared_ptr<const FileMapping> map(const std::string& hint) const;

 private:
  std::filesystem::path path_;
  int fd_ = -1;
  std::uint64_t size_ = 0;
  mutable std::shared_ptr<const FileMapping> mapping_;
};

}  // namespace bellows
