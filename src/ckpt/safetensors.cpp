// safetensors reading and writing; see safetensors.h. safetensors is a small documented format (an 8-byte
// length, a JSON header, raw little-endian data; github.com/huggingface/safetensors) and Debian packages no C++
// library for it, so it is written here, with nlohmann-json for the header. The layout rules of the writer
// follow the reference implementation (safetensors/src/tensor.rs, `prepare`), so that bellows and Python
// write identical bytes for identical tensors.
#include "bellows/ckpt/safetensors.h"

#include <ATen/ATen.h>
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <bit>
#include <cstdint>
#include <cstring>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>  // defines: json, ordered_json
#include <set>
#include <sstream>
#include <string_view>
#include <tuple>

#include "bellows/util/atomic_file.h"  // defines: AtomicFileWriter
#include "bellows/util/check.h"
#include "bellows/util/format.h"  // defines: shape_of
#include "bellows/util/read_only_file.h"

namespace bellows::ckpt {
namespace {

namespace fs = std::filesystem;
static_assert(std::endian::native == std::endian::little, "safetensors data are little-endian and mapped as is");

constexpr std::uint64_t kLengthSize = 8;               // the u64 header length
constexpr std::uint64_t kMaxHeaderSize = 100'000'000;  // the reference implementation's MAX_HEADER_SIZE
constexpr std::string_view kMetadataKey = "__metadata__";

// --- dtypes ---

struct Dtype {
  const char* name;  // the format's
  at::ScalarType type;
  std::uint64_t itemsize;
  int rank;  // position in the reference's `enum Dtype` ("in increasing alignment order"); the writer's order
};

// Ranks from safetensors 0.8 tensor.rs: BOOL=0 F4 F6_E2M3 F6_E3M2 U8=4 I8=5 F8_E5M2=6 F8_E4M3=7 F8_E8M0
// F8_E4M3FNUZ F8_E5M2FNUZ I16=11 U16 F16=13 BF16=14 I32=15 U32 F32=17 C64 F64=19 I64=20 U64.
constexpr Dtype kDtypes[] = {
    {"F64", at::kDouble, 8, 19},
    {"F32", at::kFloat, 4, 17},
    {"F16", at::kHalf, 2, 13},
    {"BF16", at::kBFloat16, 2, 14},
    {"I64", at::kLong, 8, 20},
    {"I32", at::kInt, 4, 15},
    {"I16", at::kShort, 2, 11},
    {"I8", at::kChar, 1, 5},
    {"U8", at::kByte, 1, 4},
    {"BOOL", at::kBool, 1, 0},
    {"F8_E4M3", at::kFloat8_e4m3fn, 1, 7},
    {"F8_E5M2", at::kFloat8_e5m2, 1, 6},
};

std::string supported_names() {
  std::vector<std::string> names;
  for (const auto& d : kDtypes) names.emplace_back(d.name);
  return fmt::format("{}", fmt::join(names, " "));
}

const Dtype* find_dtype(std::string_view name) {
  for (const auto& d : kDtypes) {
    if (name == d.name) return &d;
  }
  return nullptr;
}

const Dtype* find_dtype(at::ScalarType type) {
  for (const auto& d : kDtypes) {
    if (type == d.type) return &d;
  }
  return nullptr;
}

// The file offset `relative` bytes into the data section at `data_offset`; corrupt offsets may not fit in 64 bits.
std::string file_byte(std::uint64_t data_offset, std::uint64_t relative) {
  std::uint64_t at = 0;
  if (__builtin_add_overflow(data_offset, relative, &at)) return fmt::format("{} + {}", data_offset, relative);
  return fmt::format("{}", at);
}

// --- files: bellows::ReadOnlyFile (positional reads, one shared read-only mapping) ---

using Mapping = FileMapping;

class File : public ReadOnlyFile {
 public:
  explicit File(const fs::path& path) : ReadOnlyFile(path, "name the .safetensors file") {}
  std::shared_ptr<const Mapping> map() const { return ReadOnlyFile::map("read it without mapping, or raise the address-space limit"); }
};

// --- the header ---

constexpr const char* kRewriteHint = "the file is corrupt or truncated, or not a safetensors file: write it again";

[[noreturn]] void bad_header(const File& f, std::uint64_t n, const std::string& what) {
  BELLOWS_FAIL(ErrorKind::kData,
               fmt::format("{}: bad safetensors header (JSON at bytes {} to {}): {}", f.path().string(), kLengthSize,
                           kLengthSize + n, what),
               kRewriteHint);
}

// Parses the header text, refusing a key repeated in any object (nlohmann would keep the last silently).
nlohmann::json parse_json(const File& f, std::uint64_t n, const std::string& text) {
  std::vector<std::set<std::string>> keys;  // one set per open object
  std::string duplicate;
  const nlohmann::json::parser_callback_t callback = [&](int /*depth*/, nlohmann::json::parse_event_t event,
                                                         nlohmann::json& parsed) {
    using Event = nlohmann::json::parse_event_t;
    if (event == Event::object_start) keys.emplace_back();
    if (event == Event::object_end && !keys.empty()) keys.pop_back();
    if (event == Event::key && !keys.empty() && !keys.back().insert(parsed.get<std::string>()).second &&
        duplicate.empty()) {
      duplicate = parsed.get<std::string>();
    }
    return true;
  };
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(text, callback);
  } catch (const nlohmann::json::parse_error& e) {
    const std::uint64_t at = kLengthSize + (e.byte > 0 ? e.byte - 1 : 0);
    BELLOWS_FAIL(ErrorKind::kData,
                 fmt::format("{}: the safetensors header (bytes {} to {}) is not valid JSON, at byte {}: {}",
                             f.path().string(), kLengthSize, kLengthSize + n, at, e.what()),
                 kRewriteHint);
  } catch (const nlohmann::json::exception& e) {  // e.g. out_of_range 406, a number too large (found by fuzzing)
    BELLOWS_FAIL(ErrorKind::kData,
                 fmt::format("{}: the safetensors header (bytes {} to {}) cannot be read: {}", f.path().string(), kLengthSize,
                             kLengthSize + n, e.what()),
                 kRewriteHint);
  }
  if (!duplicate.empty()) bad_header(f, n, fmt::format("the key '{}' appears twice", duplicate));
  return j;
}

std::map<std::string, std::string> parse_metadata(const File& f, std::uint64_t n, const nlohmann::json& j) {
  if (!j.is_object()) bad_header(f, n, fmt::format("\"{}\" is a JSON {}, not an object", kMetadataKey, j.type_name()));
  std::map<std::string, std::string> metadata;
  for (const auto& [key, value] : j.items()) {
    if (!value.is_string()) {
      bad_header(f, n,
                 fmt::format("\"{}\" must map strings to strings; the value of '{}' is a JSON {}", kMetadataKey, key,
                             value.type_name()));
    }
    metadata.emplace(key, value.get<std::string>());
  }
  return metadata;
}

std::uint64_t get_offset(const File& f, std::uint64_t n, const std::string& name, const nlohmann::json& v) {
  if (!v.is_number_unsigned()) {
    bad_header(f, n,
               fmt::format("tensor '{}': data_offsets must be two non-negative integers, found {}", name, v.dump()));
  }
  return v.get<std::uint64_t>();
}

TensorInfo parse_tensor(const File& f, std::uint64_t n, const std::string& name, const nlohmann::json& j) {
  if (!j.is_object())
    bad_header(f, n, fmt::format("tensor '{}' is described by a JSON {}, not an object", name, j.type_name()));
  const auto field = [&](const char* key) -> const nlohmann::json& {
    const auto it = j.find(key);
    if (it == j.end()) bad_header(f, n, fmt::format("tensor '{}' has no \"{}\"", name, key));
    return *it;
  };
  TensorInfo t;
  t.name = name;

  const auto& dtype = field("dtype");
  if (!dtype.is_string()) bad_header(f, n, fmt::format("tensor '{}': \"dtype\" is not a string", name));
  const Dtype* d = find_dtype(dtype.get<std::string>());
  if (d == nullptr) {
    BELLOWS_FAIL(
        ErrorKind::kData,
        fmt::format("{}: tensor '{}' has dtype '{}', which bellows does not read (it reads {}); header at "
                    "bytes {} to {}",
                    f.path().string(), name, dtype.get<std::string>(), supported_names(), kLengthSize, kLengthSize + n),
        "convert the tensor to a supported dtype before saving it");
  }
  t.dtype = d->type;

  const auto& shape = field("shape");
  if (!shape.is_array()) bad_header(f, n, fmt::format("tensor '{}': \"shape\" is not an array", name));
  std::uint64_t nbytes = d->itemsize;
  for (const auto& dim : shape) {
    if (!dim.is_number_unsigned() || dim.get<std::uint64_t>() > static_cast<std::uint64_t>(INT64_MAX)) {
      bad_header(f, n, fmt::format("tensor '{}': the shape {} holds something other than sizes", name, shape.dump()));
    }
    t.shape.push_back(dim.get<std::int64_t>());
    if (__builtin_mul_overflow(nbytes, dim.get<std::uint64_t>(), &nbytes)) {
      bad_header(f, n, fmt::format("tensor '{}': the shape {} overflows", name, shape.dump()));
    }
  }

  const auto& offsets = field("data_offsets");
  if (!offsets.is_array() || offsets.size() != 2) {
    bad_header(f, n, fmt::format("tensor '{}': data_offsets must be [begin, end], found {}", name, offsets.dump()));
  }
  t.begin = get_offset(f, n, name, offsets[0]);
  t.end = get_offset(f, n, name, offsets[1]);
  const std::uint64_t data_offset = kLengthSize + n;
  BELLOWS_CHECK_DATA(t.begin <= t.end,
                     fmt::format("{}: tensor '{}' has data_offsets [{}, {}] that end before they begin (bytes {} "
                                 "to {} of the file)",
                                 f.path().string(), name, t.begin, t.end, file_byte(data_offset, t.begin),
                                 file_byte(data_offset, t.end)),
                     kRewriteHint);
  BELLOWS_CHECK_DATA(t.end - t.begin == nbytes,
                     fmt::format("{}: tensor '{}' is {} {} = {} bytes, but its data_offsets [{}, {}] (bytes {} to {} "
                                 "of the file) hold {}",
                                 f.path().string(), name, d->name, shape_of(t.shape), nbytes, t.begin, t.end,
                                 file_byte(data_offset, t.begin), file_byte(data_offset, t.end), t.end - t.begin),
                     kRewriteHint);
  return t;
}

// The data section must be covered exactly, as the reference implementation requires: sorted by offset, each
// tensor starts where the previous one ended, and the last one ends at the end of the file.
void check_coverage(const File& f, const SafetensorsHeader& h) {
  const std::uint64_t data_size = f.size() - h.data_offset;
  const std::string& path = f.path().string();
  std::uint64_t at = 0;
  const TensorInfo* previous = nullptr;
  for (const auto& t : h.tensors) {
    BELLOWS_CHECK_DATA(t.end <= data_size,
                       fmt::format("{}: tensor '{}' has data_offsets [{}, {}] (bytes {} to {} of the file), outside "
                                   "the data section (bytes {} to {}, {} bytes)",
                                   path, t.name, t.begin, t.end, file_byte(h.data_offset, t.begin),
                                   file_byte(h.data_offset, t.end), h.data_offset, f.size(), data_size),
                       "the file is truncated (an interrupted save or copy?): write it again");
    BELLOWS_CHECK_DATA(
        t.begin <= at,
        fmt::format("{}: a gap in the data section: bytes {} to {} of the file belong to no tensor (before tensor "
                    "'{}' at data_offsets [{}, {}])",
                    path, h.data_offset + at, h.data_offset + t.begin, t.name, t.begin, t.end),
        kRewriteHint);
    BELLOWS_CHECK_DATA(
        t.begin == at,
        fmt::format("{}: tensors '{}' and '{}' overlap: data_offsets [{}, {}] and [{}, {}] (bytes {} to {} of the "
                    "file are shared)",
                    path, previous ? previous->name : "", t.name, previous ? previous->begin : 0,
                    previous ? previous->end : 0, t.begin, t.end, h.data_offset + t.begin, h.data_offset + at),
        kRewriteHint);
    at = t.end;
    previous = &t;
  }
  BELLOWS_CHECK_DATA(at == data_size,
                     fmt::format("{}: bytes {} to {} at the end of the file belong to no tensor (the data section "
                                 "starts at byte {}; the tensors cover {} bytes of it)",
                                 path, h.data_offset + at, f.size(), h.data_offset, at),
                     kRewriteHint);
}

SafetensorsHeader read_header(const File& f) {
  const std::string& path = f.path().string();
  BELLOWS_CHECK_DATA(f.size() >= kLengthSize,
                     fmt::format("{}: not a safetensors file: {} bytes, shorter than the 8-byte header length at "
                                 "byte 0",
                                 path, f.size()),
                     kRewriteHint);
  std::uint8_t length[kLengthSize];
  f.read(0, length, kLengthSize);
  std::uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | length[i];
  BELLOWS_CHECK_DATA(n <= kMaxHeaderSize,
                     fmt::format("{}: the header length at byte 0 says {} bytes, more than the format's limit of {} "
                                 "(a corrupt length, or not a safetensors file)",
                                 path, n, kMaxHeaderSize),
                     kRewriteHint);
  BELLOWS_CHECK_DATA(kLengthSize + n <= f.size(),
                     fmt::format("{}: the header length at byte 0 says the header runs from byte {} to byte {}, past "
                                 "the end of the file ({} bytes)",
                                 path, kLengthSize, kLengthSize + n, f.size()),
                     "the file is truncated (an interrupted save or copy?): write it again");
  std::string text(static_cast<std::size_t>(n), '\0');
  f.read(kLengthSize, text.data(), n);

  const nlohmann::json j = parse_json(f, n, text);
  if (!j.is_object()) bad_header(f, n, fmt::format("the header is a JSON {}, not an object", j.type_name()));
  SafetensorsHeader h;
  h.data_offset = kLengthSize + n;
  for (const auto& [key, value] : j.items()) {
    if (key == kMetadataKey) {
      h.metadata = parse_metadata(f, n, value);
    } else {
      h.tensors.push_back(parse_tensor(f, n, key, value));
    }
  }
  std::sort(h.tensors.begin(), h.tensors.end(), [](const TensorInfo& a, const TensorInfo& b) {
    return std::tie(a.begin, a.end, a.name) < std::tie(b.begin, b.end, b.name);
  });
  check_coverage(f, h);
  return h;
}

std::uint64_t itemsize(at::ScalarType type) {
  return find_dtype(type)->itemsize;
}

// --- writing ---

std::string layout_name(at::Layout layout) {
  std::ostringstream s;
  s << layout;
  return s.str();
}

// A tensor's place in the file: its name, dtype and shape, and where it came from (its index in the caller's list).
struct Slot {
  std::string name;
  const Dtype* dtype;
  std::vector<std::int64_t> shape;
  std::size_t source;
};

std::uint64_t nbytes_of(const Slot& s) {
  std::uint64_t n = s.dtype->itemsize;
  for (const std::int64_t dim : s.shape) {
    BELLOWS_CHECK_DATA(
        dim >= 0 && !__builtin_mul_overflow(n, static_cast<std::uint64_t>(dim), &n),
        fmt::format("safetensors: tensor '{}' has the shape {}, which no file can hold", s.name, shape_of(s.shape)),
        "give every tensor a shape of non-negative sizes");
  }
  return n;
}

void check_name(const std::string& name) {
  BELLOWS_CHECK_DATA(!name.empty(), "safetensors: cannot write a tensor with an empty name",
                     "give every tensor a name");
  BELLOWS_CHECK_DATA(name != kMetadataKey,
                     fmt::format("safetensors: cannot write a tensor named '{}': the format keeps that key for the "
                                 "metadata",
                                 kMetadataKey),
                     "rename the tensor");
}

const Dtype* writable_dtype(const std::string& name, at::ScalarType type) {
  const Dtype* d = find_dtype(type);
  BELLOWS_CHECK_DATA(d != nullptr,
                     fmt::format("safetensors: tensor '{}' has dtype {}, which bellows does not write (it writes {})",
                                 name, c10::toString(type), supported_names()),
                     "convert it first, e.g. t.to(at::kFloat)");
  return d;
}

// A tensor's data as they will be written (CPU, contiguous; dtype preserved), after every check of the tensor.
at::Tensor prepare_tensor(const std::string& name, const at::Tensor& t) {
  check_name(name);
  BELLOWS_CHECK_DATA(t.defined(), fmt::format("safetensors: tensor '{}' is undefined", name),
                     "drop it from the dict, or give it a value");
  BELLOWS_CHECK_DATA(!t.is_quantized(),
                     fmt::format("safetensors: tensor '{}' is quantized ({}), which the format cannot hold", name,
                                 c10::toString(t.scalar_type())),
                     "dequantize it first (t.dequantize()), or save its int_repr() and scales as separate tensors");
  BELLOWS_CHECK_DATA(t.layout() == at::kStrided,
                     fmt::format("safetensors: tensor '{}' is not dense (layout {}); the format holds dense tensors",
                                 name, layout_name(t.layout())),
                     "convert it first (t.to_dense()), or save its indices and values as separate tensors");
  BELLOWS_CHECK_DATA(!t.is_meta(), fmt::format("safetensors: tensor '{}' is a meta tensor and has no data", name),
                     "materialize it before saving");
  writable_dtype(name, t.scalar_type());
  return t.to(at::kCPU).contiguous().resolve_conj().resolve_neg();
}

std::string dump_json(const nlohmann::ordered_json& j) {
  try {
    return j.dump();
  } catch (const nlohmann::json::type_error& e) {  // 316: a string that is not valid UTF-8
    BELLOWS_FAIL(ErrorKind::kData, fmt::format("safetensors: cannot write the header: {}", e.what()),
                 "tensor names and metadata must be valid UTF-8");
  }
}

// The 8-byte length and the padded header for these slots, which it puts in the order their data follow it.
std::string header_bytes(std::vector<Slot>& slots, const std::map<std::string, std::string>& metadata) {
  // The reference's order (descending dtype rank, then name): each tensor's data start aligned to its item size
  // when the previous ones are, and the bytes match Python's for the same tensors.
  std::sort(slots.begin(), slots.end(), [](const Slot& a, const Slot& b) {
    return a.dtype->rank != b.dtype->rank ? a.dtype->rank > b.dtype->rank : a.name < b.name;
  });
  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  if (!metadata.empty()) {
    nlohmann::ordered_json m = nlohmann::ordered_json::object();
    for (const auto& [key, value] : metadata) m[key] = value;
    header[std::string(kMetadataKey)] = std::move(m);
  }
  std::uint64_t offset = 0;
  for (const auto& s : slots) {
    const std::uint64_t n = nbytes_of(s);
    nlohmann::ordered_json info = nlohmann::ordered_json::object();
    info["dtype"] = s.dtype->name;
    info["shape"] = s.shape;
    info["data_offsets"] = {offset, offset + n};
    header[s.name] = std::move(info);
    offset += n;
  }
  std::string text = dump_json(header);
  text.append((kLengthSize - text.size() % kLengthSize) % kLengthSize, ' ');
  BELLOWS_CHECK_DATA(text.size() <= kMaxHeaderSize,
                     fmt::format("safetensors: the header would be {} bytes, more than the format's limit of {}",
                                 text.size(), kMaxHeaderSize),
                     "write fewer tensors or less metadata per file");
  std::string out;
  out.reserve(kLengthSize + text.size());
  for (int i = 0; i < 8; ++i) out.push_back(static_cast<char>((text.size() >> (8 * i)) & 0xff));
  out += text;
  return out;
}

// The tensors' data (prepare_tensor: all checked before anything is written), the header, and their slots in data
// order.
struct Prepared {
  std::vector<at::Tensor> data;
  std::string header;
  std::vector<Slot> slots;
};

Prepared prepare(const std::map<std::string, at::Tensor>& tensors, const std::map<std::string, std::string>& metadata) {
  Prepared p;
  p.data.reserve(tensors.size());
  for (const auto& [name, t] : tensors) {
    p.data.push_back(prepare_tensor(name, t));
    p.slots.push_back({name, find_dtype(t.scalar_type()), p.data.back().sizes().vec(), p.data.size() - 1});
  }
  p.header = header_bytes(p.slots, metadata);
  return p;
}

// Exactly n bytes of the file at the tensor's offset into a fresh tensor.
at::Tensor read_tensor(const File& f, std::uint64_t data_offset, const TensorInfo& t) {
  at::Tensor tensor = at::empty(t.shape, at::TensorOptions().dtype(t.dtype));
  if (t.end > t.begin) f.read(data_offset + t.begin, tensor.data_ptr(), t.end - t.begin);
  return tensor;
}

}  // namespace

// --- public API ---

const char* safetensors_dtype_name(at::ScalarType dtype) {
  const Dtype* d = find_dtype(dtype);
  BELLOWS_CHECK_DATA(d != nullptr, fmt::format("safetensors: dtype {} is not supported", c10::toString(dtype)),
                     fmt::format("use one of {}", supported_names()));
  return d->name;
}

SafetensorsHeader read_safetensors_header(const std::filesystem::path& path) {
  const File f(path);
  return read_header(f);
}

std::map<std::string, at::Tensor> read_safetensors(const std::filesystem::path& path,
                                                   std::map<std::string, std::string>* metadata, bool mmap) {
  const File f(path);
  SafetensorsHeader h = read_header(f);
  std::shared_ptr<const Mapping> mapping;
  if (mmap && f.size() > h.data_offset) mapping = f.map();

  std::map<std::string, at::Tensor> tensors;
  for (const auto& t : h.tensors) {
    const auto options = at::TensorOptions().dtype(t.dtype);
    const std::uint64_t offset = h.data_offset + t.begin, n = t.end - t.begin;
    at::Tensor tensor;
    if (mapping != nullptr && n > 0) {
      const auto* data = static_cast<const std::uint8_t*>(mapping->base) + offset;
      if (reinterpret_cast<std::uintptr_t>(data) % itemsize(t.dtype) == 0) {
        tensor = at::from_blob(
            const_cast<std::uint8_t*>(data), t.shape, [mapping](void*) {}, options);
      } else {  // another writer's unpadded header: copy rather than hand out misaligned elements
        tensor = at::empty(t.shape, options);
        std::memcpy(tensor.data_ptr(), data, n);
      }
    } else {
      tensor = read_tensor(f, h.data_offset, t);
    }
    tensors.emplace(t.name, std::move(tensor));
  }
  if (metadata != nullptr) *metadata = std::move(h.metadata);
  return tensors;
}

at::Tensor read_safetensors_tensor(const std::filesystem::path& path, const SafetensorsHeader& header,
                                   const TensorInfo& info) {
  const File f(path);
  BELLOWS_CHECK_DATA(
      header.data_offset + info.end <= f.size(),
      fmt::format("{}: tensor '{}' at bytes {} to {} lies past the end of the file ({} bytes): the file changed "
                  "after its header was read",
                  path.string(), info.name, header.data_offset + info.begin, header.data_offset + info.end, f.size()),
      kRewriteHint);
  return read_tensor(f, header.data_offset, info);
}

std::string safetensors_bytes(const std::map<std::string, at::Tensor>& tensors,
                              const std::map<std::string, std::string>& metadata) {
  Prepared p = prepare(tensors, metadata);
  std::string& out = p.header;
  std::uint64_t total = out.size();
  for (const auto& t : p.data) total += t.nbytes();
  out.reserve(total);
  for (const auto& s : p.slots) {
    const at::Tensor& t = p.data[s.source];
    if (t.nbytes() > 0) out.append(static_cast<const char*>(t.data_ptr()), t.nbytes());
  }
  return std::move(out);
}

void write_safetensors(const std::filesystem::path& path, const std::map<std::string, at::Tensor>& tensors,
                       const std::map<std::string, std::string>& metadata) {
  const Prepared p = prepare(tensors, metadata);  // all checks before the file is touched
  AtomicFileWriter w(path);
  w.write(p.header);
  for (const auto& s : p.slots) {
    const at::Tensor& t = p.data[s.source];
    if (t.nbytes() > 0) w.write(t.data_ptr(), t.nbytes());
  }
  w.commit();
}

void write_safetensors_streamed(const std::filesystem::path& path, const std::vector<TensorSpec>& specs,
                                const std::map<std::string, std::string>& metadata, const TensorLoader& load) {
  // The header, and every check it allows, before the file is touched.
  std::vector<Slot> slots;
  slots.reserve(specs.size());
  std::set<std::string> names;
  for (std::size_t i = 0; i < specs.size(); ++i) {
    const TensorSpec& spec = specs[i];
    check_name(spec.name);
    BELLOWS_CHECK_DATA(names.insert(spec.name).second,
                       fmt::format("safetensors: the tensor '{}' is listed twice", spec.name),
                       "give every tensor of a file its own name");
    slots.push_back({spec.name, writable_dtype(spec.name, spec.dtype), spec.shape, i});
  }
  const std::string header = header_bytes(slots, metadata);
  AtomicFileWriter w(path);
  w.write(header);
  for (const auto& s : slots) {
    // One tensor at a time: loaded, checked against what the header says, written, released.
    const at::Tensor t = prepare_tensor(s.name, load(specs[s.source]));
    BELLOWS_CHECK(t.scalar_type() == s.dtype->type && t.sizes().vec() == s.shape,
                  fmt::format("safetensors: tensor '{}' was announced as {} {} but loaded as {} {} (writing {})",
                              s.name, s.dtype->name, shape_of(s.shape), c10::toString(t.scalar_type()),
                              shape_of(t.sizes().vec()), path.string()),
                  "the loader must return the tensor its spec describes: report this bug");
    if (t.nbytes() > 0) w.write(t.data_ptr(), t.nbytes());
  }
  w.commit();
}

}  // namespace bellows::ckpt
