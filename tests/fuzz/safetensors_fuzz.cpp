// Fuzzes the safetensors reader of include/bellows/ckpt/safetensors.h over a temp file: ckpt::read_safetensors_header,
// then ckpt::read_safetensors read and memory-mapped (both must agree with the header), and the round trip through
// ckpt::safetensors_bytes (what bellows writes must read back to the same tensors and metadata).
//
// Input: the file's bytes.
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <map>
#include <string>

#include "bellows/ckpt/safetensors.h"
#include "bellows/util/error.h"
#include "fuzz_common.h"

namespace {

using namespace bellows;
namespace fz = bellows::fuzz;

using Tensors = std::map<std::string, at::Tensor>;
using Metadata = std::map<std::string, std::string>;

bool same_bytes(const at::Tensor& a, const at::Tensor& b) {
  if (a.scalar_type() != b.scalar_type() || a.sizes() != b.sizes()) return false;
  const at::Tensor ca = a.contiguous(), cb = b.contiguous();
  return ca.nbytes() == cb.nbytes() &&
         (ca.nbytes() == 0 || std::memcmp(ca.const_data_ptr(), cb.const_data_ptr(), ca.nbytes()) == 0);
}

// The tensors match the header: the same names, dtypes and shapes.
void check_against_header(const Tensors& tensors, const ckpt::SafetensorsHeader& header, const char* how) {
  fz::expect(tensors.size() == header.tensors.size(), std::string(how) + ": tensor count differs from the header");
  for (const auto& info : header.tensors) {
    const auto it = tensors.find(info.name);
    if (it == tensors.end()) {
      fz::expect(false, std::string(how) + ": '" + info.name + "' of the header is missing");
      continue;
    }
    fz::touch(it->second);
    fz::expect(it->second.scalar_type() == info.dtype && it->second.sizes().vec() == info.shape,
               std::string(how) + ": '" + info.name + "' has another dtype or shape than its header entry");
    const auto bytes = static_cast<std::uint64_t>(it->second.numel()) * it->second.element_size();
    fz::expect(bytes == info.end - info.begin, std::string(how) + ": '" + info.name + "' size differs from its data_offsets");
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const fz::fs::path path = fz::input_file(data, size, "t.safetensors");
  if (path.empty()) return 0;

  ckpt::SafetensorsHeader header;
  bool header_ok = false;
  try {
    header = ckpt::read_safetensors_header(path);
    header_ok = true;
  } catch (const Error& e) {
    fz::rejected(e);
  }

  Tensors read;
  Metadata metadata;
  bool read_ok = false;
  try {
    read = ckpt::read_safetensors(path, &metadata, /*mmap=*/false);
    read_ok = true;
    if (header_ok) check_against_header(read, header, "read_safetensors(mmap=false)");
  } catch (const Error& e) {
    fz::rejected(e);
  }
  try {
    const Tensors mapped = ckpt::read_safetensors(path, nullptr, /*mmap=*/true);
    fz::expect(read_ok, "read_safetensors accepts the file mapped but not read");
    if (header_ok) check_against_header(mapped, header, "read_safetensors(mmap=true)");
    for (const auto& [name, t] : mapped) {
      const auto it = read.find(name);
      fz::expect(it != read.end() && same_bytes(t, it->second), "'" + name + "' differs between mmap=true and mmap=false");
    }
  } catch (const Error& e) {
    fz::expect(!read_ok, "read_safetensors accepts the file read but not mapped");
    fz::rejected(e);
  }
  if (!read_ok) return 0;
  fz::expect(header_ok, "read_safetensors accepts a file whose header read_safetensors_header rejects");

  // What bellows writes from these tensors reads back the same. (safetensors_bytes may refuse what the reader
  // took, e.g. a name that is not UTF-8: a rejection; reading its own bytes back must not fail.)
  std::string bytes;
  try {
    bytes = ckpt::safetensors_bytes(read, metadata);
  } catch (const Error& e) {
    return fz::rejected(e);
  }
  const fz::fs::path again = fz::scratch_dir() / "again.safetensors";
  fz::write_file(again, bytes);
  try {
    Metadata metadata_back;
    const Tensors back = ckpt::read_safetensors(again, &metadata_back, /*mmap=*/false);
    fz::expect(metadata_back == metadata, "safetensors_bytes round trip changed the metadata");
    fz::expect(back.size() == read.size(), "safetensors_bytes round trip changed the tensor count");
    for (const auto& [name, t] : read) {
      const auto it = back.find(name);
      fz::expect(it != back.end() && same_bytes(t, it->second), "safetensors_bytes round trip changed '" + name + "'");
    }
  } catch (const Error& e) {
    if (fz::invariants_enabled()) fz::violated(std::string("bellows cannot read the safetensors_bytes() it wrote: ") + e.what());
    return fz::rejected(e);
  }
  return 0;
}
