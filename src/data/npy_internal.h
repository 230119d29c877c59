// Private to src/data: what the NPY reader (npy_format.cpp), the zip/NPZ reader (npz.cpp) and the writer
// (npy_writer.cpp) share -- the NPY magic and header, little-endian fields, zip record signatures, CRC-32 --
// so that each of them is written once.
#pragma once

#include <ATen/core/Tensor.h>

#include <bit>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "bellows/util/read_only_file.h"  // defines: ReadOnlyFile, FileMapping

namespace bellows::data::npy_detail {

static_assert(std::endian::native == std::endian::little, "NPY data are little-endian: mapped and written as is");

inline constexpr char kNpyMagic[] = "\x93NUMPY";
inline constexpr std::size_t kNpyMagicSize = 6;

// Zip record signatures and extra-field ids (APPNOTE.TXT; kAlignExtraId is zipalign's).
inline constexpr std::uint32_t kLocalSig = 0x04034b50, kCentralSig = 0x02014b50, kEndSig = 0x06054b50;
inline constexpr std::uint32_t kZip64EndSig = 0x06064b50, kZip64LocatorSig = 0x07064b50;
inline constexpr std::uint16_t kZip64ExtraId = 0x0001, kAlignExtraId = 0xd935;

// --- little-endian fields ---

inline std::uint16_t get_u16(const std::uint8_t* p) {
  return static_cast<std::uint16_t>(p[0] | (p[1] << 8));
}
inline std::uint32_t get_u32(const std::uint8_t* p) {
  return static_cast<std::uint32_t>(p[0]) | (static_cast<std::uint32_t>(p[1]) << 8) |
         (static_cast<std::uint32_t>(p[2]) << 16) | (static_cast<std::uint32_t>(p[3]) << 24);
}
inline std::uint64_t get_u64(const std::uint8_t* p) {
  return static_cast<std::uint64_t>(get_u32(p)) | (static_cast<std::uint64_t>(get_u32(p + 4)) << 32);
}
inline void put_u16(std::string& s, std::uint16_t v) {
  s.push_back(static_cast<char>(v & 0xff));
  s.push_back(static_cast<char>(v >> 8));
}
inline void put_u32(std::string& s, std::uint32_t v) {
  put_u16(s, static_cast<std::uint16_t>(v & 0xffff));
  put_u16(s, static_cast<std::uint16_t>(v >> 16));
}
inline void put_u64(std::string& s, std::uint64_t v) {
  put_u32(s, static_cast<std::uint32_t>(v & 0xffffffffu));
  put_u32(s, static_cast<std::uint32_t>(v >> 32));
}

// --- files: bellows::ReadOnlyFile (positional reads, one shared read-only mapping) ---

using Mapping = FileMapping;

class File : public ReadOnlyFile {
 public:
  explicit File(const std::filesystem::path& path) : ReadOnlyFile(path, "name the .npy or .npz file") {}
  std::shared_ptr<const Mapping> map() const {
    return ReadOnlyFile::map("read it without mapping (data.npy.mmap: false), or raise the address-space limit");
  }
};

// --- the NPY header (npy_format.cpp) ---

struct NpyDtype {
  at::ScalarType type;
  std::uint64_t itemsize;
  const char* name;  // numpy's: "float32"
};

struct NpyHeader {
  NpyDtype dtype;
  std::string descr;
  std::vector<std::int64_t> shape;
  std::uint64_t data_offset = 0;  // from the start of the NPY bytes
  std::uint64_t nbytes = 0;
};

// Where the header ends, from the preamble. `prefix` holds the first min(total, 12) bytes of NPY data that is
// `total` bytes long. `where` names the file (or archive entry) in messages.
std::uint64_t npy_header_end(const std::vector<std::uint8_t>& prefix, std::uint64_t total, const std::string& where);
// `bytes`: the NPY data up to the end of the header (npy_header_end); `total`: its whole length.
NpyHeader parse_npy_header(const std::vector<std::uint8_t>& bytes, std::uint64_t total, const std::string& where);
// The NPY header of the `total` bytes starting at `offset` of `file`.
NpyHeader read_npy_header(const File& file, std::uint64_t offset, std::uint64_t total, const std::string& where);

// A tensor over `data`, keeping `owner` alive; a copy when the data are not aligned to their item size.
at::Tensor tensor_over(const std::uint8_t* data, const NpyHeader& h, std::function<void(void*)> owner);
// A tensor over the mapped bytes at `offset`, keeping the mapping alive.
at::Tensor over_mapping(const std::shared_ptr<const Mapping>& m, std::uint64_t offset, const NpyHeader& h);

// --- zip (npz.cpp) ---

// zlib's CRC-32 of n bytes at p, continuing from `crc` (0 to start).
std::uint32_t crc32_of(std::uint32_t crc, const std::uint8_t* p, std::uint64_t n);

}  // namespace bellows::data::npy_detail
