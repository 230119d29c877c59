// NPZ archives (np.savez, np.savez_compressed) read into tensors; see npy.h. The zip container is read here
// (end-of-central-directory, ZIP64, central directory, local headers), with zlib for DEFLATE entries and
// CRC-32; each entry is an NPY file read by npy_format.cpp's header parser.
#include "bellows/data/npy.h"

#include <ATen/ATen.h>
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <zlib.h>

#include <algorithm>
#include <climits>
#include <cstring>
#include <set>

#include "bellows/util/check.h"
#include "data/npy_internal.h"  // defines: File, NpyHeader, read_npy_header, zip signatures, crc32_of

namespace bellows::data {
using namespace npy_detail;

namespace {

// --- zip archives: end-of-central-directory (and ZIP64), central directory, local headers ---

struct ZipEntry {
  std::string name;
  std::uint16_t flags = 0;
  std::uint16_t method = 0;
  std::uint32_t crc = 0;
  std::uint64_t compressed_size = 0;
  std::uint64_t size = 0;
  std::uint64_t local_offset = 0;
  std::uint64_t directory_offset = 0;  // of its central directory record, for messages
};

[[noreturn]] void corrupt_zip(const File& f, const std::string& what) {
  BELLOWS_FAIL(ErrorKind::kData, fmt::format("{}: corrupt zip archive: {}", f.path().string(), what),
               "the .npz is damaged or truncated: write it again (np.savez / np.savez_compressed)");
}

std::string array_name(const std::string& entry) {
  return entry.size() > 4 && entry.ends_with(".npy") ? entry.substr(0, entry.size() - 4) : entry;
}

// Where the central directory lies and how many entries it holds: the end record's fields, or its ZIP64 twin's.
struct ZipDirectorySpan {
  std::uint64_t count = 0, size = 0, offset = 0;
  std::uint64_t end_offset = 0;  // of the end-of-central-directory record
};

// A file shorter than an end record is not a zip archive (perhaps an .npy named as an .npz).
void check_zip_length(const File& f) {
  const std::uint64_t size = f.size();
  if (size < 22) {
    const auto head = f.read(0, size);
    const bool npy = size >= 6 && std::memcmp(head.data(), kNpyMagic, 6) == 0;
    BELLOWS_FAIL(ErrorKind::kData,
                 fmt::format("{}: not a zip archive: {} bytes, shorter than an end-of-central-directory record (22)",
                             f.path().string(), size),
                 npy ? "this is an .npy file: read it as such" : "write it with np.savez or np.savez_compressed");
  }
}

// The end record's offset in `tail` (the file's last bytes), searched backwards by its signature; -1 when none.
std::int64_t find_zip_end_record(const std::vector<std::uint8_t>& tail) {
  const auto tail_size = static_cast<std::int64_t>(tail.size());
  for (std::int64_t i = tail_size - 22; i >= 0; --i) {
    if (get_u32(tail.data() + i) == kEndSig && i + 22 + get_u16(tail.data() + i + 20) <= tail_size) return i;
  }
  return -1;
}

// The end-of-central-directory record: the directory's place and its entry count (their 16- and 32-bit fields).
ZipDirectorySpan read_zip_end_record(const File& f) {
  check_zip_length(f);
  const std::uint64_t size = f.size();
  // The end record sits in the last 22 + 65535 (comment) bytes; search backwards for its signature.
  const std::uint64_t tail_size = std::min<std::uint64_t>(size, 22 + 0xffff);
  const std::uint64_t tail_start = size - tail_size;
  const auto tail = f.read(tail_start, tail_size);
  const std::int64_t found = find_zip_end_record(tail);
  if (found < 0) {
    const bool npy = std::memcmp(f.read(0, 6).data(), kNpyMagic, 6) == 0;
    BELLOWS_FAIL(ErrorKind::kData,
                 fmt::format("{}: not a zip archive (no end-of-central-directory record in its last {} bytes)",
                             f.path().string(), tail_size),
                 npy ? "this is an .npy file: read it as such"
                     : "the .npz is truncated or not an .npz: write it again with np.savez or np.savez_compressed");
  }
  const std::uint8_t* end = tail.data() + found;
  ZipDirectorySpan d;
  d.end_offset = tail_start + static_cast<std::uint64_t>(found);
  d.count = get_u16(end + 10);
  d.size = get_u32(end + 12);
  d.offset = get_u32(end + 16);
  if (get_u16(end + 4) != 0 || get_u16(end + 6) != 0) {
    corrupt_zip(f, fmt::format("multi-disk (split) archives are not supported (end record at byte {})", d.end_offset));
  }
  return d;
}

// ZIP64: a locator right before the end record points at the ZIP64 end record with 64-bit fields, which replace
// the end record's. Whether there was one.
bool read_zip64_end_record(const File& f, ZipDirectorySpan& d) {
  if (d.end_offset < 20) return false;
  const auto locator = f.read(d.end_offset - 20, 20);
  if (get_u32(locator.data()) != kZip64LocatorSig) return false;
  const std::uint64_t z_offset = get_u64(locator.data() + 8);
  if (z_offset + 56 > d.end_offset - 20) {
    corrupt_zip(
        f, fmt::format("the ZIP64 locator at byte {} points at byte {}, past the end", d.end_offset - 20, z_offset));
  }
  const auto z = f.read(z_offset, 56);
  if (get_u32(z.data()) != kZip64EndSig) {
    corrupt_zip(f, fmt::format("no ZIP64 end-of-central-directory record at byte {}", z_offset));
  }
  d.count = get_u64(z.data() + 32);
  d.size = get_u64(z.data() + 40);
  d.offset = get_u64(z.data() + 48);
  return true;
}

// The directory lies before the end record, with room for its entries' fixed parts.
void check_zip_directory_span(const File& f, const ZipDirectorySpan& d, bool zip64) {
  if (!zip64 && (d.count == 0xffff || d.size == 0xffffffff || d.offset == 0xffffffff) &&
      (d.offset > d.end_offset || d.size > d.end_offset)) {
    corrupt_zip(f, fmt::format("the end record at byte {} asks for ZIP64 records that are missing", d.end_offset));
  }
  if (d.offset > d.end_offset || d.size > d.end_offset - d.offset) {
    corrupt_zip(f,
                fmt::format("the central directory ({} bytes at byte {}) does not fit before the end record at byte {}",
                            d.size, d.offset, d.end_offset));
  }
  if (d.count > d.size / 46) {
    corrupt_zip(f, fmt::format("{} entries cannot fit in a central directory of {} bytes", d.count, d.size));
  }
}

// ZIP64 extra field: 64-bit values for exactly those fields saturated at 0xffffffff, in this order. `x` points
// at the extra fields (`extra_len` bytes) of the entry whose directory record is at byte `at`.
void read_zip64_extra(const File& f, const std::uint8_t* x, std::uint64_t extra_len, std::uint64_t at, ZipEntry& e) {
  for (std::uint64_t xp = 0; xp + 4 <= extra_len;) {
    const std::uint16_t id = get_u16(x + xp), len = get_u16(x + xp + 2);
    if (xp + 4 + len > extra_len) {
      corrupt_zip(f, fmt::format("entry '{}' at byte {}: extra field overruns", e.name, at));
    }
    if (id == kZip64ExtraId) {
      std::uint64_t q = xp + 4;
      const auto take = [&](std::uint64_t& field) {
        if (field != 0xffffffff) return;
        if (q + 8 > xp + 4 + len) {
          corrupt_zip(f, fmt::format("entry '{}' at byte {}: short ZIP64 extra field", e.name, at));
        }
        field = get_u64(x + q);
        q += 8;
      };
      take(e.size);
      take(e.compressed_size);
      take(e.local_offset);
    }
    xp += 4 + len;
  }
}

// Central directory entry i, whose record starts at `pos` of `dir`; `*record_size` is set to the record's length.
ZipEntry read_central_record(const File& f, const std::vector<std::uint8_t>& dir, const ZipDirectorySpan& d,
                             std::uint64_t pos, std::uint64_t i, std::uint64_t* record_size) {
  const std::uint64_t at = d.offset + pos;
  if (pos + 46 > d.size || get_u32(dir.data() + pos) != kCentralSig) {
    corrupt_zip(f, fmt::format("central directory entry {} at byte {} is missing or has a bad signature", i, at));
  }
  const std::uint8_t* r = dir.data() + pos;
  ZipEntry e;
  e.flags = get_u16(r + 8);
  e.method = get_u16(r + 10);
  e.crc = get_u32(r + 16);
  e.compressed_size = get_u32(r + 20);
  e.size = get_u32(r + 24);
  const std::uint64_t name_len = get_u16(r + 28), extra_len = get_u16(r + 30), comment_len = get_u16(r + 32);
  e.local_offset = get_u32(r + 42);
  e.directory_offset = at;
  if (pos + 46 + name_len + extra_len + comment_len > d.size) {
    corrupt_zip(f, fmt::format("central directory entry {} at byte {} runs past the directory's end", i, at));
  }
  e.name.assign(reinterpret_cast<const char*>(r + 46), name_len);
  read_zip64_extra(f, r + 46 + name_len, extra_len, at, e);
  *record_size = 46 + name_len + extra_len + comment_len;
  return e;
}

// The archive's entries (directories left out), each array name once.
std::vector<ZipEntry> read_directory(const File& f) {
  ZipDirectorySpan d = read_zip_end_record(f);
  const bool zip64 = read_zip64_end_record(f, d);
  check_zip_directory_span(f, d, zip64);
  const auto dir = f.read(d.offset, d.size);
  std::vector<ZipEntry> entries;
  std::set<std::string> names;
  std::uint64_t pos = 0;
  for (std::uint64_t i = 0; i < d.count; ++i) {
    std::uint64_t record_size = 0;
    ZipEntry e = read_central_record(f, dir, d, pos, i, &record_size);
    pos += record_size;
    if (e.name.ends_with('/')) continue;  // a directory
    if (!names.insert(array_name(e.name)).second) {
      corrupt_zip(f, fmt::format("the array name '{}' appears twice (entry at byte {})", array_name(e.name),
                                 e.directory_offset));
    }
    entries.push_back(std::move(e));
  }
  return entries;
}

// Where an entry's data start: after its local header, whose name and extra lengths may differ from the
// central directory's.
std::uint64_t entry_data_offset(const File& f, const ZipEntry& e) {
  if (e.local_offset > f.size() || f.size() - e.local_offset < 30) {
    corrupt_zip(f, fmt::format("entry '{}': local header at byte {} lies past the end ({} bytes)", e.name,
                               e.local_offset, f.size()));
  }
  const auto h = f.read(e.local_offset, 30);
  if (get_u32(h.data()) != kLocalSig) {
    corrupt_zip(f, fmt::format("entry '{}': bad local header signature at byte {}", e.name, e.local_offset));
  }
  const std::uint64_t data = e.local_offset + 30 + get_u16(h.data() + 26) + get_u16(h.data() + 28);
  if (data > f.size() || f.size() - data < e.compressed_size) {
    corrupt_zip(f, fmt::format("entry '{}': {} bytes of data at byte {} run past the end of the archive ({} bytes)",
                               e.name, e.compressed_size, data, f.size()));
  }
  return data;
}

void check_crc(const File& f, const ZipEntry& e, std::uint32_t actual) {
  BELLOWS_CHECK_DATA(
      actual == e.crc,
      fmt::format("{}: entry '{}' fails its CRC-32 check (directory at byte {} says {:08x}, the data give {:08x})",
                  f.path().string(), e.name, e.directory_offset, e.crc, actual),
      "the .npz is corrupt: write it again");
}

// A DEFLATE entry, inflated into a byte buffer that the returned tensor lives in.
at::Tensor inflate_entry(const File& f, const ZipEntry& e, std::uint64_t data_offset, const std::string& where) {
  // zlib's best ratio is about 1032:1; a larger claim is a corrupt directory, not a reason to allocate.
  if (e.size > e.compressed_size * 1032 + 1024) {
    corrupt_zip(f, fmt::format("entry '{}' claims {} bytes from {} compressed", e.name, e.size, e.compressed_size));
  }
  const auto in = f.read(data_offset, e.compressed_size);
  // One byte more than the directory promises, so that an entry inflating to more is caught.
  const std::uint64_t capacity = e.size + 1;
  at::Tensor buffer = at::empty({static_cast<std::int64_t>(capacity)}, at::kByte);
  auto* out = buffer.data_ptr<std::uint8_t>();

  z_stream zs{};
  BELLOWS_CHECK(inflateInit2(&zs, -MAX_WBITS) == Z_OK, "zlib inflateInit2 failed", "report this bug");
  std::uint64_t in_pos = 0, out_pos = 0;
  int rc = Z_OK;
  for (;;) {
    if (zs.avail_in == 0 && in_pos < in.size()) {
      zs.next_in = const_cast<Bytef*>(in.data() + in_pos);
      zs.avail_in = static_cast<uInt>(std::min<std::uint64_t>(in.size() - in_pos, UINT_MAX));
      in_pos += zs.avail_in;
    }
    if (zs.avail_out == 0 && out_pos < capacity) {
      zs.next_out = out + out_pos;
      zs.avail_out = static_cast<uInt>(std::min<std::uint64_t>(capacity - out_pos, UINT_MAX));
      out_pos += zs.avail_out;
    }
    rc = inflate(&zs, Z_NO_FLUSH);
    if (rc == Z_OK) continue;  // progress; Z_BUF_ERROR means none is possible
    break;
  }
  const std::uint64_t consumed = zs.total_in, produced = zs.total_out;
  const std::string message = zs.msg ? zs.msg : "";
  inflateEnd(&zs);
  if (rc != Z_STREAM_END || produced != e.size) {
    const std::string why =
        produced > e.size    ? fmt::format("it inflates to more than the {} bytes the directory says", e.size)
        : rc == Z_STREAM_END ? fmt::format("it inflates to {} bytes, the directory says {}", produced, e.size)
        : rc == Z_BUF_ERROR  ? "the compressed data end early"
        : message.empty()    ? fmt::format("zlib error {}", rc)
                             : message;
    BELLOWS_FAIL(ErrorKind::kData,
                 fmt::format("{}: inflate error after {} of {} compressed bytes (entry data at byte {}): {}", where,
                             consumed, e.compressed_size, data_offset, why),
                 "the .npz is corrupt: write it again");
  }
  check_crc(f, e, crc32_of(0, out, e.size));
  return buffer;
}

at::Tensor read_entry(const File& f, const ZipEntry& e, const NpyReadOptions& options) {
  const std::string where = fmt::format("{} entry '{}'", f.path().string(), e.name);
  BELLOWS_CHECK_DATA(!(e.flags & 1), fmt::format("{}: the entry is encrypted", where),
                     "save the arrays without encryption");
  const std::uint64_t data = entry_data_offset(f, e);
  if (e.method == 8) {
    at::Tensor buffer = inflate_entry(f, e, data, where);
    const auto* bytes = buffer.data_ptr<std::uint8_t>();
    const std::vector<std::uint8_t> prefix(bytes, bytes + std::min<std::uint64_t>(e.size, 12));
    const std::uint64_t end = npy_header_end(prefix, e.size, where);
    const NpyHeader h = parse_npy_header(std::vector<std::uint8_t>(bytes, bytes + end), e.size, where);
    return tensor_over(bytes + h.data_offset, h, [buffer](void*) {});
  }
  BELLOWS_CHECK_DATA(e.method == 0,
                     fmt::format("{}: compression method {} is not supported (numpy writes 0, stored, or 8, deflate)",
                                 where, e.method),
                     "write the archive with np.savez or np.savez_compressed");
  if (e.compressed_size != e.size) {
    corrupt_zip(
        f, fmt::format("stored entry '{}' has {} bytes but claims {} uncompressed", e.name, e.compressed_size, e.size));
  }
  const NpyHeader h = read_npy_header(f, data, e.size, where);
  if (options.mmap) return over_mapping(f.map(), data + h.data_offset, h);
  // Read into a tensor, checking the CRC on the way (a mapped entry is not read here, so it is not checked).
  at::Tensor t = at::empty(h.shape, at::TensorOptions().dtype(h.dtype.type));
  const auto header = f.read(data, h.data_offset);
  f.read(data + h.data_offset, t.data_ptr(), h.nbytes);
  std::uint32_t crc = crc32_of(0, header.data(), header.size());
  crc = crc32_of(crc, static_cast<const std::uint8_t*>(t.data_ptr()), h.nbytes);
  check_crc(f, e, crc);
  return t;
}

}  // namespace

std::uint32_t npy_detail::crc32_of(std::uint32_t crc, const std::uint8_t* p, std::uint64_t n) {
  return static_cast<std::uint32_t>(crc32_z(crc, p, static_cast<z_size_t>(n)));
}

// --- public API ---

std::vector<std::string> list_npz(const std::filesystem::path& path) {
  const File f(path);
  std::vector<std::string> names;
  for (const auto& e : read_directory(f)) names.push_back(array_name(e.name));
  return names;
}

std::map<std::string, at::Tensor> read_npz(const std::filesystem::path& path, NpyReadOptions options) {
  const File f(path);
  std::map<std::string, at::Tensor> arrays;
  for (const auto& e : read_directory(f)) arrays.emplace(array_name(e.name), read_entry(f, e, options));
  return arrays;
}

at::Tensor read_npz_array(const std::filesystem::path& path, const std::string& name, NpyReadOptions options) {
  const File f(path);
  const auto entries = read_directory(f);
  std::vector<std::string> names;
  for (const auto& e : entries) {
    if (array_name(e.name) == name || e.name == name) return read_entry(f, e, options);
    names.push_back(array_name(e.name));
  }
  BELLOWS_FAIL(ErrorKind::kData,
               fmt::format("{}: no array '{}' (entry '{}.npy'); the archive holds: {}", path.string(), name, name,
                           names.empty() ? std::string("nothing") : fmt::format("{}", fmt::join(names, ", "))),
               "name one of the arrays above (file.npz:array_name)");
}

}  // namespace bellows::data
