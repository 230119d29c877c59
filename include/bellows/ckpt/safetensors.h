// The safetensors format (huggingface/safetensors): the tensor files of bellows checkpoints, readable by
// `safetensors.torch.load_file` and every tool of that ecosystem. Headers are validated before any data are
// touched; reading can memory-map the file.
//   write_safetensors(dir / "model.safetensors", state, {{"format", "pt"}});
//   auto tensors = read_safetensors(dir / "model.safetensors", &metadata, /*mmap=*/true);
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <filesystem>
#include <functional>
#include <map>
#include <string>
#include <vector>

namespace bellows::ckpt {

// Layout: an 8-byte little-endian u64 N, N bytes of UTF-8 JSON (the header), then the data section, which
// the tensors' [begin, end) byte ranges cover exactly. Dtypes: F64 F32 F16 BF16 I64 I32 I16 I8 U8 BOOL
// F8_E4M3 F8_E5M2; any other is a kData error naming it.

struct TensorInfo {
  std::string name;
  at::ScalarType dtype;
  std::vector<std::int64_t> shape;   // empty for a 0-dim tensor
  std::uint64_t begin = 0, end = 0;  // offsets relative to the data section
};

struct SafetensorsHeader {
  std::vector<TensorInfo> tensors;              // in data order (by begin offset)
  std::map<std::string, std::string> metadata;  // the header's "__metadata__"
  std::uint64_t data_offset = 0;                // where the data section starts in the file: 8 + N
};

// Reads and validates only the header (cheap, for `bellows ckpt inspect`). Every inconsistency (a short file,
// an absurd header length, bad JSON, an unknown dtype, offsets that disagree with the shape, lie outside the
// data section, overlap, leave gaps, duplicate names, a bad __metadata__) is a kData error naming the file, the
// tensor and the byte offsets.
SafetensorsHeader read_safetensors_header(const std::filesystem::path& path);

// All tensors (CPU, the file's dtypes), plus the metadata when `metadata` is given.
// mmap=true maps the file read-only (PROT_READ, MAP_PRIVATE) and the tensors view the mapping, which lives as
// long as any of them does: such tensors are READ-ONLY memory (writing into them faults; clone() first). Data
// not aligned to their item size in the file (other writers' unpadded headers) are copied instead.
// mmap=false reads into ordinary tensors.
std::map<std::string, at::Tensor> read_safetensors(const std::filesystem::path& path,
                                                   std::map<std::string, std::string>* metadata = nullptr,
                                                   bool mmap = false);

// One tensor of a file whose header `header` is (read_safetensors_header(path)): only its bytes are read, into an
// ordinary CPU tensor. kData error when they lie past the end of the file (it changed since the header was read).
at::Tensor read_safetensors_tensor(const std::filesystem::path& path, const SafetensorsHeader& header,
                                   const TensorInfo& info);

// The file's bytes for these tensors (moved to the CPU, made contiguous; dtype preserved) and metadata, laid
// out as the Python library lays them out, so that the same tensors give the same bytes:
//   - tensors ordered by descending dtype rank (the safetensors Dtype enum, roughly the alignment: I64 F64
//     F32 I32 BF16 F16 I16 F8_E4M3 F8_E5M2 I8 U8 BOOL), then by name; every tensor's data are then aligned
//     to its item size;
//   - compact JSON: "__metadata__" first (its keys in name order; Python's order is that of a Rust HashMap,
//     i.e. arbitrary), then the tensors in data order, each {"dtype","shape","data_offsets"};
//   - the header padded with spaces to a multiple of 8 bytes.
// Undefined, sparse, quantized or meta tensors, unsupported dtypes, an empty name or "__metadata__" as a name,
// and names or metadata that are not valid UTF-8 are kData errors naming the tensor.
std::string safetensors_bytes(const std::map<std::string, at::Tensor>& tensors,
                              const std::map<std::string, std::string>& metadata = {});

// Writes safetensors_bytes() to `path` (streamed: the data are not copied into one buffer), durably and
// atomically (util/atomic_file.h: a temporary file beside it, fsynced, renamed over `path`, the directory
// fsynced). A failed write leaves `path` as it was and no temporary file (kResource error).
void write_safetensors(const std::filesystem::path& path, const std::map<std::string, at::Tensor>& tensors,
                       const std::map<std::string, std::string>& metadata = {});

// What the header says of a tensor before its data exist.
struct TensorSpec {
  std::string name;
  at::ScalarType dtype;
  std::vector<std::int64_t> shape;  // empty for a 0-dim tensor
};
using TensorLoader = std::function<at::Tensor(const TensorSpec&)>;

// The bytes write_safetensors() writes for tensors of these names, dtypes and shapes, without ever holding more than
// one of them: the header from `specs` (any order; names unique), then, in the file's data order, each tensor from
// `load`, written and released before the next is loaded. Durable and atomic as write_safetensors. The header's
// checks (names, dtypes, duplicates) come before the file is touched, each loaded tensor's when it is loaded; a
// loaded tensor of another dtype or shape than its spec is an internal error (the loader's bug). An error from `load`
// propagates and leaves `path` as it was.
void write_safetensors_streamed(const std::filesystem::path& path, const std::vector<TensorSpec>& specs,
                                const std::map<std::string, std::string>& metadata, const TensorLoader& load);

// The format's name for a dtype ("F32"); a kData error for dtypes the format (or bellows) does not hold.
const char* safetensors_dtype_name(at::ScalarType dtype);

}  // namespace bellows::ckpt
