// The NPY format: the preamble, the header (a Python dict literal), and .npy files read into tensors, mapped or
// read; see npy.h. NPY is a small documented format (numpy.lib.format: magic, version, header dict, raw C-order
// data) and Debian packages no C++ library for it, so the parser is written here.
#include "bellows/data/npy.h"

#include <ATen/ATen.h>
#include <fmt/format.h>

#include <algorithm>
#include <climits>
#include <cstring>
#include <map>
#include <string_view>

#include "bellows/util/check.h"
#include "data/npy_internal.h"  // defines: File, NpyHeader, get_u16/u32, kNpyMagic

namespace bellows::data {
using namespace npy_detail;

namespace {

std::string hex_bytes(const std::uint8_t* p, std::size_t n) {
  std::string s;
  for (std::size_t i = 0; i < n; ++i) s += fmt::format("{}{:02x}", i ? " " : "", p[i]);
  return s;
}

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

std::string shape_text(const std::vector<std::int64_t>& shape) {
  if (shape.empty()) return "scalar";
  std::string s;
  for (std::size_t i = 0; i < shape.size(); ++i) s += fmt::format("{}{}", i ? "×" : "", shape[i]);
  return s;
}

[[noreturn]] void bad_header(const std::string& where, std::uint64_t offset, const std::string& what) {
  BELLOWS_FAIL(ErrorKind::kData, fmt::format("{}: bad NPY header dict at byte {}: {}", where, offset, what),
               "the file is corrupt or not written by numpy.save: write it again with numpy.save");
}

}  // namespace

namespace npy_detail {

// Where the header ends, from the preamble. `prefix` holds the first min(total, 12) bytes of NPY data that is
// `total` bytes long.
std::uint64_t npy_header_end(const std::vector<std::uint8_t>& prefix, std::uint64_t total, const std::string& where) {
  const std::size_t n = std::min<std::size_t>(prefix.size(), kNpyMagicSize);
  // n may be 0 (an empty file, where data() may be null: memcmp must not see it, even for 0 bytes).
  const bool magic_ok = n == 0 || std::memcmp(prefix.data(), kNpyMagic, n) == 0;
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

}  // namespace npy_detail

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

}  // namespace bellows::data
