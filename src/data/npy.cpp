// NumPy .npy/.npz reading and writing; see npy.h. NPY is a small documented format (numpy.lib.format: magic,
// version, a Python-literal header dict, raw C-order data) and Debian packages no C++ library for it, so the
// parser is written here; so is the zip container (end-of-central-directory, ZIP64, central directory), with
// zlib for DEFLATE entries and CRC-32.
#include "bellows/data/npy.h"

#include <ATen/ATen.h>
#include <fcntl.h>
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include <bit>
#include <cerrno>
#include <climits>
#include <cstring>
#include <set>
#include <string_view>

#include "bellows/data/tensor_dataset.h"  // defines: TensorDataset
#include "bellows/util/check.h"
#include "bellows/util/read_only_file.h"

namespace bellows::data {
namespace {

namespace fs = std::filesystem;
static_assert(std::endian::native == std::endian::little, "the NPY reader maps little-endian data as is");

constexpr char kNpyMagic[] = "\x93NUMPY";
constexpr std::size_t kNpyMagicSize = 6;

std::uint16_t get_u16(const std::uint8_t* p) {
  return static_cast<std::uint16_t>(p[0] | (p[1] << 8));
}
std::uint32_t get_u32(const std::uint8_t* p) {
  return static_cast<std::uint32_t>(p[0]) | (static_cast<std::uint32_t>(p[1]) << 8) |
         (static_cast<std::uint32_t>(p[2]) << 16) | (static_cast<std::uint32_t>(p[3]) << 24);
}
std::uint64_t get_u64(const std::uint8_t* p) {
  return static_cast<std::uint64_t>(get_u32(p)) | (static_cast<std::uint64_t>(get_u32(p + 4)) << 32);
}
void put_u16(std::string& s, std::uint16_t v) {
  s.push_back(static_cast<char>(v & 0xff));
  s.push_back(static_cast<char>(v >> 8));
}
void put_u32(std::string& s, std::uint32_t v) {
  put_u16(s, static_cast<std::uint16_t>(v & 0xffff));
  put_u16(s, static_cast<std::uint16_t>(v >> 16));
}
void put_u64(std::string& s, std::uint64_t v) {
  put_u32(s, static_cast<std::uint32_t>(v & 0xffffffffu));
  put_u32(s, static_cast<std::uint32_t>(v >> 32));
}

std::string hex_bytes(const std::uint8_t* p, std::size_t n) {
  std::string s;
  for (std::size_t i = 0; i < n; ++i) s += fmt::format("{}{:02x}", i ? " " : "", p[i]);
  return s;
}

// --- files: bellows::ReadOnlyFile (positional reads, one shared read-only mapping) ---

using Mapping = FileMapping;

class File : public ReadOnlyFile {
 public:
  explicit File(const fs::path& path) : ReadOnlyFile(path, "name the .npy or .npz file") {}
  std::shared_ptr<const Mapping> map() const { return ReadOnlyFile::map("read it without mapping (data.npy.mmap: false), or raise the address-space limit"); }
};

// --- the NPY header: preamble, then a Python dict literal ---

// The subset of Python literals that NPY headers use: strings, integers, True/False/None, tuples, lists, dicts.
struct PyValue {
  enum class Kind { kStr, kInt, kBool, kNone, kSeq, kDict } kind = Kind::kNone;
  std::string str;
  std::int64_t integer = 0;
  bool boolean = false;
  std::vector<PyValue> items;     // tuple or list; a dict's values
  std::vector<std::string> keys;  // a dict's keys (no std::pair of the incomplete type)
  bool is_list = false;
};

class PyParser {
 public:
  PyParser(std::string_view text, std::string where, std::uint64_t offset)
      : text_(text), where_(std::move(where)), offset_(offset) {}

  PyValue parse_all() {
    PyValue v = value();
    skip_space();
    if (pos_ != text_.size()) fail("unexpected text after the dict");
    return v;
  }

 private:
  [[noreturn]] void fail(const std::string& what) const {
    BELLOWS_FAIL(ErrorKind::kData,
                 fmt::format("{}: cannot parse the NPY header dict at byte {}: {} (header: {})", where_, offset_ + pos_,
                             what, std::string(text_.substr(0, std::min<std::size_t>(text_.size(), 200)))),
                 "the file is corrupt or not written by numpy.save: write it again with numpy.save");
  }
  void skip_space() {
    while (pos_ < text_.size() &&
           (text_[pos_] == ' ' || text_[pos_] == '\t' || text_[pos_] == '\n' || text_[pos_] == '\r')) {
      ++pos_;
    }
  }
  bool eat(char c) {
    skip_space();
    if (pos_ < text_.size() && text_[pos_] == c) {
      ++pos_;
      return true;
    }
    return false;
  }
  bool word(std::string_view w) {
    if (text_.substr(pos_, w.size()) == w) {
      pos_ += w.size();
      return true;
    }
    return false;
  }

  PyValue value() {
    if (++depth_ > 16) fail("nested too deeply");
    skip_space();
    if (pos_ >= text_.size()) fail("the header ends early");
    PyValue v;
    const char c = text_[pos_];
    if (c == '\'' || c == '"') {
      v.kind = PyValue::Kind::kStr;
      v.str = string();
    } else if (c == '-' || (c >= '0' && c <= '9')) {
      v.kind = PyValue::Kind::kInt;
      v.integer = integer();
    } else if (word("True")) {
      v.kind = PyValue::Kind::kBool;
      v.boolean = true;
    } else if (word("False")) {
      v.kind = PyValue::Kind::kBool;
    } else if (word("None")) {
      v.kind = PyValue::Kind::kNone;
    } else if (c == '(' || c == '[') {
      v.kind = PyValue::Kind::kSeq;
      v.is_list = c == '[';
      ++pos_;
      const char close = c == '(' ? ')' : ']';
      while (!eat(close)) {
        v.items.push_back(value());
        if (!eat(',')) {
          if (!eat(close)) fail(fmt::format("expected ',' or '{}'", close));
          break;
        }
      }
    } else if (c == '{') {
      v.kind = PyValue::Kind::kDict;
      ++pos_;
      while (!eat('}')) {
        skip_space();
        if (pos_ >= text_.size() || (text_[pos_] != '\'' && text_[pos_] != '"')) fail("expected a string key");
        std::string key = string();
        if (!eat(':')) fail("expected ':' after a key");
        v.keys.push_back(std::move(key));
        v.items.push_back(value());
        if (!eat(',')) {
          if (!eat('}')) fail("expected ',' or '}'");
          break;
        }
      }
    } else {
      fail(fmt::format("unexpected character '{}'", c));
    }
    --depth_;
    return v;
  }

  std::string string() {
    const char quote = text_[pos_++];
    std::string s;
    while (pos_ < text_.size() && text_[pos_] != quote) {
      if (text_[pos_] == '\\') fail("escape sequences are not expected in an NPY header");
      s.push_back(text_[pos_++]);
    }
    if (pos_ >= text_.size()) fail("unterminated string");
    ++pos_;
    return s;
  }

  std::int64_t integer() {
    const bool negative = text_[pos_] == '-';
    if (negative) ++pos_;
    if (pos_ >= text_.size() || text_[pos_] < '0' || text_[pos_] > '9') fail("expected digits");
    std::int64_t v = 0;
    while (pos_ < text_.size() && text_[pos_] >= '0' && text_[pos_] <= '9') {
      if (v > (INT64_MAX - 9) / 10) fail("integer too large");
      v = v * 10 + (text_[pos_++] - '0');
    }
    if (pos_ < text_.size() && text_[pos_] == 'L') ++pos_;  // Python 2 longs, in very old files
    return negative ? -v : v;
  }

  std::string_view text_;
  std::string where_;
  std::uint64_t offset_;
  std::size_t pos_ = 0;
  int depth_ = 0;
};

struct NpyDtype {
  at::ScalarType type;
  std::uint64_t itemsize;
  const char* name;  // numpy's: "float32"
};

[[noreturn]] void unsupported_dtype(const std::string& where, const std::string& descr, const std::string& why,
                                    const std::string& hint) {
  BELLOWS_FAIL(ErrorKind::kData, fmt::format("{}: dtype '{}' is not supported: {}", where, descr, why), hint);
}

NpyDtype parse_descr(const std::string& descr, const std::string& where) {
  const auto unsupported = [&](const std::string& why, const std::string& hint) {
    unsupported_dtype(where, descr, why, hint);
  };
  const std::string convert = "convert it before saving, e.g. np.save(path, a.astype(np.float32)) or .astype(np.int64)";
  if (descr.empty()) unsupported("empty dtype", convert);
  char order = '|';
  std::string code = descr;
  if (descr[0] == '<' || descr[0] == '>' || descr[0] == '|' || descr[0] == '=') {
    order = descr[0];
    code = descr.substr(1);
  }
  static const std::map<std::string, NpyDtype> types = {
      {"b1", {at::kBool, 1, "bool"}},    {"i1", {at::kChar, 1, "int8"}},     {"u1", {at::kByte, 1, "uint8"}},
      {"i2", {at::kShort, 2, "int16"}},  {"i4", {at::kInt, 4, "int32"}},     {"i8", {at::kLong, 8, "int64"}},
      {"f2", {at::kHalf, 2, "float16"}}, {"f4", {at::kFloat, 4, "float32"}}, {"f8", {at::kDouble, 8, "float64"}}};
  const auto it = types.find(code);
  if (it == types.end()) {
    const char kind = code.empty() ? '?' : code[0];
    if (kind == 'O') {
      unsupported("object arrays hold pickled Python objects", "save numeric arrays (np.asarray(a, dtype=np.float32))");
    }
    if (kind == 'U' || kind == 'S' || kind == 'a') {
      unsupported("string arrays", "encode strings as integer ids before saving");
    }
    if (kind == 'u') unsupported("unsigned integers wider than 8 bits", "save them as signed: a.astype(np.int64)");
    unsupported_dtype(where, descr, "bellows reads f2 f4 f8 i1 i2 i4 i8 u1 b1", convert);
  }
  if (order == '>' && it->second.itemsize > 1) {
    unsupported("big-endian data", fmt::format("save it little-endian: a.astype('<{}')", code));
  }
  return it->second;
}

struct NpyHeader {
  NpyDtype dtype;
  std::string descr;
  std::vector<std::int64_t> shape;
  std::uint64_t data_offset = 0;  // from the start of the NPY bytes
  std::uint64_t nbytes = 0;
};

std::string shape_text(const std::vector<std::int64_t>& shape) {
  if (shape.empty()) return "scalar";
  std::string s;
  for (std::size_t i = 0; i < shape.size(); ++i) s += fmt::format("{}{}", i ? "×" : "", shape[i]);
  return s;
}

// Where the header ends, from the preamble. `prefix` holds the first min(total, 12) bytes of NPY data that is
// `total` bytes long.
std::uint64_t npy_header_end(const std::vector<std::uint8_t>& prefix, std::uint64_t total, const std::string& where) {
  const std::size_t n = std::min<std::size_t>(prefix.size(), kNpyMagicSize);
  const bool magic_ok = std::memcmp(prefix.data(), kNpyMagic, n) == 0;
  const bool zip = prefix.size() >= 4 && std::memcmp(prefix.data(), "PK\x03\x04", 4) == 0;
  BELLOWS_CHECK_DATA(
      magic_ok,
      fmt::format("{}: not an NPY file: bad magic at byte 0 (found {}, expected 93 4e 55 4d 50 59 = \\x93NUMPY)", where,
                  hex_bytes(prefix.data(), n)),
      zip ? "this is a zip archive (an .npz?): read it as file.npz:array_name" : "write the array with numpy.save");
  BELLOWS_CHECK_DATA(total >= 10,
                     fmt::format("{}: truncated NPY preamble: {} bytes, the preamble alone is 10 or 12", where, total),
                     "the file is truncated: write it again");
  const int major = prefix[6], minor = prefix[7];
  BELLOWS_CHECK_DATA(
      major >= 1 && major <= 3,
      fmt::format("{}: NPY format version {}.{} at byte 6 is not supported (1.0, 2.0, 3.0 are)", where, major, minor),
      "write it with numpy.save");
  const std::uint64_t len_size = major == 1 ? 2 : 4;
  BELLOWS_CHECK_DATA(
      total >= 8 + len_size,
      fmt::format("{}: truncated NPY preamble: {} bytes, version {}.0 needs {}", where, total, major, 8 + len_size),
      "the file is truncated: write it again");
  const std::uint64_t header_len = major == 1 ? get_u16(prefix.data() + 8) : get_u32(prefix.data() + 8);
  const std::uint64_t end = 8 + len_size + header_len;
  BELLOWS_CHECK_DATA(
      total >= end,
      fmt::format("{}: truncated header: the header dict runs from byte {} to byte {}, the data have {} bytes", where,
                  8 + len_size, end, total),
      "the file is truncated: write it again");
  return end;
}

[[noreturn]] void bad_header(const std::string& where, std::uint64_t offset, const std::string& what) {
  BELLOWS_FAIL(ErrorKind::kData, fmt::format("{}: bad NPY header dict at byte {}: {}", where, offset, what),
               "the file is corrupt or not written by numpy.save: write it again with numpy.save");
}

// `bytes`: the NPY data up to the end of the header (npy_header_end); `total`: its whole length.
NpyHeader parse_npy_header(const std::vector<std::uint8_t>& bytes, std::uint64_t total, const std::string& where) {
  const std::uint64_t start = bytes[6] == 1 ? 10 : 12;
  const std::string_view text(reinterpret_cast<const char*>(bytes.data()) + start, bytes.size() - start);
  const PyValue dict = PyParser(text, where, start).parse_all();
  if (dict.kind != PyValue::Kind::kDict) bad_header(where, start, "the header is not a dict");
  const auto find = [&](const std::string& key) -> const PyValue& {
    for (std::size_t i = 0; i < dict.keys.size(); ++i) {
      if (dict.keys[i] == key) return dict.items[i];
    }
    bad_header(where, start, fmt::format("no '{}' key", key));
  };
  NpyHeader h;
  const PyValue& descr = find("descr");
  if (descr.kind != PyValue::Kind::kStr) {
    BELLOWS_FAIL(
        ErrorKind::kData,
        fmt::format("{}: structured dtype (record array) in the NPY header at byte {} is not supported", where, start),
        "save each field as its own array (np.savez(path, a=rec['a'], b=rec['b']))");
  }
  h.descr = descr.str;
  h.dtype = parse_descr(h.descr, where);

  const PyValue& shape = find("shape");
  if (shape.kind != PyValue::Kind::kSeq) bad_header(where, start, "'shape' is not a tuple");
  std::uint64_t count = 1;
  for (const auto& d : shape.items) {
    if (d.kind != PyValue::Kind::kInt || d.integer < 0)
      bad_header(where, start, "'shape' holds something other than sizes");
    h.shape.push_back(d.integer);
    const bool overflow = __builtin_mul_overflow(count, static_cast<std::uint64_t>(d.integer), &count);
    BELLOWS_CHECK_DATA(!overflow, fmt::format("{}: shape {} overflows", where, shape_text(h.shape)),
                       "the file is corrupt");
  }
  const bool overflow = __builtin_mul_overflow(count, h.dtype.itemsize, &h.nbytes);
  BELLOWS_CHECK_DATA(!overflow, fmt::format("{}: shape {} overflows", where, shape_text(h.shape)),
                     "the file is corrupt");

  const PyValue& fortran = find("fortran_order");
  if (fortran.kind != PyValue::Kind::kBool) bad_header(where, start, "'fortran_order' is not True or False");
  BELLOWS_CHECK_DATA(
      !fortran.boolean || h.shape.size() <= 1,
      fmt::format("{}: the array is stored in Fortran (column-major) order; bellows reads C order", where),
      "save it with np.save(path, np.ascontiguousarray(a))");

  h.data_offset = bytes.size();
  BELLOWS_CHECK_DATA(total - h.data_offset >= h.nbytes,
                     fmt::format("{}: header says {} {} = {} bytes of data after offset {}, the file has {}", where,
                                 shape_text(h.shape), h.dtype.name, h.nbytes, h.data_offset, total),
                     "the file is truncated (an interrupted save or copy?): write it again");
  return h;
}

// Reads the NPY header of the `total` bytes starting at `offset` of `file`.
NpyHeader read_npy_header(const File& file, std::uint64_t offset, std::uint64_t total, const std::string& where) {
  const auto prefix = file.read(offset, std::min<std::uint64_t>(total, 12));
  const std::uint64_t end = npy_header_end(prefix, total, where);
  return parse_npy_header(file.read(offset, end), total, where);
}

// A tensor over `data`, keeping `owner` alive; a copy when the data are not aligned to their item size.
at::Tensor tensor_over(const std::uint8_t* data, const NpyHeader& h, std::function<void(void*)> owner) {
  const auto options = at::TensorOptions().dtype(h.dtype.type);
  if (h.nbytes == 0) return at::empty(h.shape, options);
  if (reinterpret_cast<std::uintptr_t>(data) % h.dtype.itemsize == 0) {
    return at::from_blob(const_cast<std::uint8_t*>(data), h.shape, std::move(owner), options);
  }
  at::Tensor t = at::empty(h.shape, options);
  std::memcpy(t.data_ptr(), data, h.nbytes);
  return t;
}

at::Tensor over_mapping(const std::shared_ptr<const Mapping>& m, std::uint64_t offset, const NpyHeader& h) {
  const auto* base = static_cast<const std::uint8_t*>(m->base);
  return tensor_over(base + offset, h, [m](void*) {});
}

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

constexpr std::uint32_t kLocalSig = 0x04034b50, kCentralSig = 0x02014b50, kEndSig = 0x06054b50;
constexpr std::uint32_t kZip64EndSig = 0x06064b50, kZip64LocatorSig = 0x07064b50;
constexpr std::uint16_t kZip64ExtraId = 0x0001, kAlignExtraId = 0xd935;

[[noreturn]] void corrupt_zip(const File& f, const std::string& what) {
  BELLOWS_FAIL(ErrorKind::kData, fmt::format("{}: corrupt zip archive: {}", f.path().string(), what),
               "the .npz is damaged or truncated: write it again (np.savez / np.savez_compressed)");
}

std::string array_name(const std::string& entry) {
  return entry.size() > 4 && entry.ends_with(".npy") ? entry.substr(0, entry.size() - 4) : entry;
}

std::vector<ZipEntry> read_directory(const File& f) {
  const std::uint64_t size = f.size();
  if (size < 22) {
    const auto head = f.read(0, size);
    const bool npy = size >= 6 && std::memcmp(head.data(), kNpyMagic, 6) == 0;
    BELLOWS_FAIL(ErrorKind::kData,
                 fmt::format("{}: not a zip archive: {} bytes, shorter than an end-of-central-directory record (22)",
                             f.path().string(), size),
                 npy ? "this is an .npy file: read it as such" : "write it with np.savez or np.savez_compressed");
  }
  // The end record sits in the last 22 + 65535 (comment) bytes; search backwards for its signature.
  const std::uint64_t tail_size = std::min<std::uint64_t>(size, 22 + 0xffff);
  const std::uint64_t tail_start = size - tail_size;
  const auto tail = f.read(tail_start, tail_size);
  std::int64_t found = -1;
  for (std::int64_t i = static_cast<std::int64_t>(tail_size) - 22; i >= 0; --i) {
    if (get_u32(tail.data() + i) == kEndSig &&
        static_cast<std::uint64_t>(i) + 22 + get_u16(tail.data() + i + 20) <= tail_size) {
      found = i;
      break;
    }
  }
  if (found < 0) {
    const bool npy = std::memcmp(f.read(0, 6).data(), kNpyMagic, 6) == 0;
    BELLOWS_FAIL(ErrorKind::kData,
                 fmt::format("{}: not a zip archive (no end-of-central-directory record in its last {} bytes)",
                             f.path().string(), tail_size),
                 npy ? "this is an .npy file: read it as such"
                     : "the .npz is truncated or not an .npz: write it again with np.savez or np.savez_compressed");
  }
  const std::uint8_t* end = tail.data() + found;
  const std::uint64_t end_offset = tail_start + static_cast<std::uint64_t>(found);
  std::uint64_t count = get_u16(end + 10), dir_size = get_u32(end + 12), dir_offset = get_u32(end + 16);
  if (get_u16(end + 4) != 0 || get_u16(end + 6) != 0) {
    corrupt_zip(f, fmt::format("multi-disk (split) archives are not supported (end record at byte {})", end_offset));
  }

  // ZIP64: a locator right before the end record points at the ZIP64 end record with 64-bit fields.
  bool zip64 = false;
  if (end_offset >= 20) {
    const auto locator = f.read(end_offset - 20, 20);
    if (get_u32(locator.data()) == kZip64LocatorSig) {
      const std::uint64_t z_offset = get_u64(locator.data() + 8);
      if (z_offset + 56 > end_offset - 20) {
        corrupt_zip(
            f, fmt::format("the ZIP64 locator at byte {} points at byte {}, past the end", end_offset - 20, z_offset));
      }
      const auto z = f.read(z_offset, 56);
      if (get_u32(z.data()) != kZip64EndSig) {
        corrupt_zip(f, fmt::format("no ZIP64 end-of-central-directory record at byte {}", z_offset));
      }
      count = get_u64(z.data() + 32);
      dir_size = get_u64(z.data() + 40);
      dir_offset = get_u64(z.data() + 48);
      zip64 = true;
    }
  }
  if (!zip64 && (count == 0xffff || dir_size == 0xffffffff || dir_offset == 0xffffffff) &&
      (dir_offset > end_offset || dir_size > end_offset)) {
    corrupt_zip(f, fmt::format("the end record at byte {} asks for ZIP64 records that are missing", end_offset));
  }
  if (dir_offset > end_offset || dir_size > end_offset - dir_offset) {
    corrupt_zip(f,
                fmt::format("the central directory ({} bytes at byte {}) does not fit before the end record at byte {}",
                            dir_size, dir_offset, end_offset));
  }
  if (count > dir_size / 46) {
    corrupt_zip(f, fmt::format("{} entries cannot fit in a central directory of {} bytes", count, dir_size));
  }

  const auto dir = f.read(dir_offset, dir_size);
  std::vector<ZipEntry> entries;
  std::set<std::string> names;
  std::uint64_t pos = 0;
  for (std::uint64_t i = 0; i < count; ++i) {
    const std::uint64_t at = dir_offset + pos;
    if (pos + 46 > dir_size || get_u32(dir.data() + pos) != kCentralSig) {
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
    if (pos + 46 + name_len + extra_len + comment_len > dir_size) {
      corrupt_zip(f, fmt::format("central directory entry {} at byte {} runs past the directory's end", i, at));
    }
    e.name.assign(reinterpret_cast<const char*>(r + 46), name_len);
    // ZIP64 extra field: 64-bit values for exactly those fields saturated at 0xffffffff, in this order.
    const std::uint8_t* x = r + 46 + name_len;
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
    pos += 46 + name_len + extra_len + comment_len;
    if (e.name.ends_with('/')) continue;  // a directory
    if (!names.insert(array_name(e.name)).second) {
      corrupt_zip(f, fmt::format("the array name '{}' appears twice (entry at byte {})", array_name(e.name), at));
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

std::uint32_t crc32_of(std::uint32_t crc, const std::uint8_t* p, std::uint64_t n) {
  return static_cast<std::uint32_t>(crc32_z(crc, p, static_cast<z_size_t>(n)));
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

// --- writing ---

std::string npy_descr(at::ScalarType type) {
  switch (type) {
    case at::kBool: return "|b1";
    case at::kChar: return "|i1";
    case at::kByte: return "|u1";
    case at::kShort: return "<i2";
    case at::kInt: return "<i4";
    case at::kLong: return "<i8";
    case at::kHalf: return "<f2";
    case at::kFloat: return "<f4";
    case at::kDouble: return "<f8";
    default:
      BELLOWS_FAIL(ErrorKind::kData, fmt::format("cannot write a {} tensor as NPY", c10::toString(type)),
                   "convert it first (float32, float64, float16, int8/16/32/64, uint8 or bool)");
  }
}

// The NPY preamble and header (padded so that the data start 64-byte aligned) of a CPU contiguous tensor.
std::string npy_header_bytes(const at::Tensor& t) {
  std::string shape = "(";
  for (std::int64_t i = 0; i < t.dim(); ++i) {
    shape += fmt::format("{}{}", t.size(i), t.dim() == 1 ? "," : (i + 1 < t.dim() ? ", " : ""));
  }
  shape += ")";
  std::string dict =
      fmt::format("{{'descr': '{}', 'fortran_order': False, 'shape': {}, }}", npy_descr(t.scalar_type()), shape);
  const bool v2 = dict.size() + 1 + 10 > 0xffff;
  const std::size_t preamble = v2 ? 12 : 10;
  const std::size_t total = (preamble + dict.size() + 1 + 63) / 64 * 64;
  dict.append(total - preamble - dict.size() - 1, ' ');
  dict.push_back('\n');
  std::string out(kNpyMagic, kNpyMagicSize);
  out.push_back(static_cast<char>(v2 ? 2 : 1));
  out.push_back(0);
  if (v2) {
    put_u32(out, static_cast<std::uint32_t>(dict.size()));
  } else {
    put_u16(out, static_cast<std::uint16_t>(dict.size()));
  }
  return out + dict;
}

at::Tensor cpu_contiguous(const at::Tensor& t) {
  BELLOWS_CHECK_DATA(t.defined(), "cannot write an undefined tensor", "report this bug");
  return t.to(at::kCPU).contiguous();
}

// Writes through a temporary file renamed into place, so a reader never sees half an array.
class AtomicWriter {
 public:
  explicit AtomicWriter(fs::path path) : path_(std::move(path)) {
    tmp_ = path_;
    tmp_ += fmt::format(".tmp-{}", ::getpid());
    fd_ = ::open(tmp_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    BELLOWS_CHECK_RESOURCE(fd_ >= 0, fmt::format("cannot create {}: {}", tmp_.string(), std::strerror(errno)),
                           "check that the directory exists and is writable");
  }
  AtomicWriter(const AtomicWriter&) = delete;
  AtomicWriter& operator=(const AtomicWriter&) = delete;
  ~AtomicWriter() {
    if (fd_ >= 0) {
      ::close(fd_);
      ::unlink(tmp_.c_str());
    }
  }
  std::uint64_t offset() const { return offset_; }
  void write(const void* data, std::uint64_t n) {
    const auto* p = static_cast<const char*>(data);
    while (n > 0) {
      const ssize_t put = ::write(fd_, p, static_cast<std::size_t>(std::min<std::uint64_t>(n, std::uint64_t{1} << 30)));
      if (put < 0 && errno == EINTR) continue;
      BELLOWS_CHECK_RESOURCE(put > 0, fmt::format("cannot write {}: {}", tmp_.string(), std::strerror(errno)),
                             "check the free disk space");
      p += put;
      n -= static_cast<std::uint64_t>(put);
      offset_ += static_cast<std::uint64_t>(put);
    }
  }
  void write(const std::string& s) { write(s.data(), s.size()); }
  void commit() {
    const int rc = ::close(fd_);
    fd_ = -1;
    if (rc != 0 || ::rename(tmp_.c_str(), path_.c_str()) != 0) {
      const int e = errno;
      ::unlink(tmp_.c_str());
      BELLOWS_FAIL(ErrorKind::kResource, fmt::format("cannot write {}: {}", path_.string(), std::strerror(e)),
                   "check the free disk space and that the directory is writable");
    }
  }

 private:
  fs::path path_, tmp_;
  int fd_ = -1;
  std::uint64_t offset_ = 0;
};

struct WrittenEntry {
  std::string name;
  std::uint32_t crc;
  std::uint64_t size;
  std::uint64_t local_offset;
};

}  // namespace

// --- public API ---

at::Tensor read_npy(const std::filesystem::path& path, NpyReadOptions options) {
  const File f(path);
  const NpyHeader h = read_npy_header(f, 0, f.size(), path.string());
  if (h.nbytes == 0) return at::empty(h.shape, at::TensorOptions().dtype(h.dtype.type));
  if (options.mmap) return over_mapping(f.map(), h.data_offset, h);
  at::Tensor t = at::empty(h.shape, at::TensorOptions().dtype(h.dtype.type));
  f.read(h.data_offset, t.data_ptr(), h.nbytes);
  return t;
}

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

void write_npy(const std::filesystem::path& path, const at::Tensor& t) {
  const at::Tensor c = cpu_contiguous(t);
  const std::string header = npy_header_bytes(c);
  AtomicWriter w(path);
  w.write(header);
  w.write(c.data_ptr(), c.nbytes());
  w.commit();
}

void write_npz(const std::filesystem::path& path, const std::map<std::string, at::Tensor>& arrays,
               NpzWriteOptions options) {
  AtomicWriter w(path);
  std::vector<WrittenEntry> written;
  for (const auto& [name, tensor] : arrays) {
    const at::Tensor c = cpu_contiguous(tensor);
    const std::string header = npy_header_bytes(c);
    WrittenEntry e{name + ".npy", 0, header.size() + c.nbytes(), w.offset()};
    e.crc = crc32_of(crc32_of(0, reinterpret_cast<const std::uint8_t*>(header.data()), header.size()),
                     static_cast<const std::uint8_t*>(c.data_ptr()), c.nbytes());
    const bool zip64 = options.force_zip64 || e.size >= 0xffffffff;
    std::string local;
    put_u32(local, kLocalSig);
    put_u16(local, zip64 ? 45 : 20);  // version needed: 4.5 for ZIP64
    put_u16(local, 0);                // flags
    put_u16(local, 0);                // stored
    put_u16(local, 0);                // time 00:00
    put_u16(local, 0x21);             // date 1980-01-01: fixed, so equal arrays give equal files
    put_u32(local, e.crc);
    put_u32(local, zip64 ? 0xffffffff : static_cast<std::uint32_t>(e.size));
    put_u32(local, zip64 ? 0xffffffff : static_cast<std::uint32_t>(e.size));
    std::string extra;
    if (zip64) {
      put_u16(extra, kZip64ExtraId);
      put_u16(extra, 16);
      put_u64(extra, e.size);
      put_u64(extra, e.size);
    }
    // Pad with an alignment extra field (zipalign's id) so that the array data start 64-byte aligned in the
    // file: then read_npz can map them. The NPY header is itself a multiple of 64 bytes.
    const std::uint64_t unpadded = e.local_offset + 30 + e.name.size() + extra.size();
    if (unpadded % 64 != 0) {
      const std::uint64_t pad = (64 - (unpadded + 6) % 64) % 64;
      put_u16(extra, kAlignExtraId);
      put_u16(extra, static_cast<std::uint16_t>(2 + pad));
      put_u16(extra, 64);
      extra.append(pad, '\0');
    }
    put_u16(local, static_cast<std::uint16_t>(e.name.size()));
    put_u16(local, static_cast<std::uint16_t>(extra.size()));
    local.append(e.name).append(extra).append(header);
    w.write(local);
    w.write(c.data_ptr(), c.nbytes());
    written.push_back(std::move(e));
  }

  const std::uint64_t dir_offset = w.offset();
  for (const auto& e : written) {
    const bool big_size = options.force_zip64 || e.size >= 0xffffffff;
    const bool big_offset = options.force_zip64 || e.local_offset >= 0xffffffff;
    std::string extra;
    if (big_size || big_offset) {
      put_u16(extra, kZip64ExtraId);
      put_u16(extra, static_cast<std::uint16_t>((big_size ? 16 : 0) + (big_offset ? 8 : 0)));
      if (big_size) {
        put_u64(extra, e.size);
        put_u64(extra, e.size);
      }
      if (big_offset) put_u64(extra, e.local_offset);
    }
    std::string r;
    put_u32(r, kCentralSig);
    put_u16(r, (3 << 8) | 45);  // made by: Unix, 4.5
    put_u16(r, extra.empty() ? 20 : 45);
    put_u16(r, 0);
    put_u16(r, 0);
    put_u16(r, 0);
    put_u16(r, 0x21);
    put_u32(r, e.crc);
    put_u32(r, big_size ? 0xffffffff : static_cast<std::uint32_t>(e.size));
    put_u32(r, big_size ? 0xffffffff : static_cast<std::uint32_t>(e.size));
    put_u16(r, static_cast<std::uint16_t>(e.name.size()));
    put_u16(r, static_cast<std::uint16_t>(extra.size()));
    put_u16(r, 0);            // comment
    put_u16(r, 0);            // disk
    put_u16(r, 0);            // internal attributes
    put_u32(r, 0644u << 16);  // external attributes: a Unix rw-r--r-- file
    put_u32(r, big_offset ? 0xffffffff : static_cast<std::uint32_t>(e.local_offset));
    r.append(e.name).append(extra);
    w.write(r);
  }
  const std::uint64_t dir_size = w.offset() - dir_offset;
  const std::uint64_t count = written.size();

  const bool zip64_end = options.force_zip64 || count >= 0xffff || dir_size >= 0xffffffff || dir_offset >= 0xffffffff;
  std::string end;
  if (zip64_end) {
    const std::uint64_t z_offset = w.offset();
    put_u32(end, kZip64EndSig);
    put_u64(end, 44);  // size of the rest of this record
    put_u16(end, (3 << 8) | 45);
    put_u16(end, 45);
    put_u32(end, 0);
    put_u32(end, 0);
    put_u64(end, count);
    put_u64(end, count);
    put_u64(end, dir_size);
    put_u64(end, dir_offset);
    put_u32(end, kZip64LocatorSig);
    put_u32(end, 0);
    put_u64(end, z_offset);
    put_u32(end, 1);
  }
  put_u32(end, kEndSig);
  put_u16(end, 0);
  put_u16(end, 0);
  put_u16(end, zip64_end ? 0xffff : static_cast<std::uint16_t>(count));
  put_u16(end, zip64_end ? 0xffff : static_cast<std::uint16_t>(count));
  put_u32(end, zip64_end ? 0xffffffff : static_cast<std::uint32_t>(dir_size));
  put_u32(end, zip64_end ? 0xffffffff : static_cast<std::uint32_t>(dir_offset));
  put_u16(end, 0);
  w.write(end);
  w.commit();
}

std::shared_ptr<Dataset> make_npy_dataset(const std::map<std::string, std::string>& arrays, NpyReadOptions options) {
  BELLOWS_CHECK_CONFIG(!arrays.empty(), "npy dataset: no arrays given",
                       "map tensor names to files, e.g. x: train_x.npy, y: train.npz:y");
  std::map<std::string, at::Tensor> tensors;
  std::vector<std::string> parts;
  std::string first_file;
  for (const auto& [name, source] : arrays) {
    // "file.npz:array", "file.npz" (the array named like the tensor), or "file.npy".
    const auto colon = source.rfind(':');
    std::string file = source, array;
    if (colon != std::string::npos && std::string_view(source).substr(0, colon).ends_with(".npz")) {
      file = source.substr(0, colon);
      array = source.substr(colon + 1);
    } else if (source.ends_with(".npz")) {
      array = name;
    }
    tensors.emplace(name, array.empty() ? read_npy(file, options) : read_npz_array(file, array, options));
    parts.push_back(fmt::format("{}={}", name, array.empty() ? file : fmt::format("{}:{}", file, array)));
    if (first_file.empty()) first_file = file;
  }
  const std::int64_t n = tensors.begin()->second.dim() > 0 ? tensors.begin()->second.size(0) : 0;
  TensorDatasetOptions o;
  o.name = fmt::format("npy {} ({} samples)", fmt::join(parts, ", "), n);
  o.float_dtype = at::kFloat;
  o.describe = [first_file](std::int64_t i) { return fmt::format("{} index {}", first_file, i); };
  return std::make_shared<TensorDataset>(std::move(tensors), std::move(o));
}

}  // namespace bellows::data
