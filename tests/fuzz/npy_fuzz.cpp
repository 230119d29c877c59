// Fuzzes the NumPy readers of include/bellows/data/npy.h over a temp file: data::read_npy on a .npy, or
// data::list_npz, data::read_npz and data::read_npz_array on a .npz, memory-mapped or read; every tensor
// returned is read to its last byte (a mapping that ends early faults, a short buffer trips ASan).
//
// Input: one options byte, then the file's bytes. bit 0: .npz (else .npy); bit 1: mmap (else read).
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "bellows/data/npy.h"
#include "bellows/util/error.h"
#include "fuzz_common.h"

namespace {

using namespace bellows;
namespace fz = bellows::fuzz;

bool same_bytes(const at::Tensor& a, const at::Tensor& b) {
  if (a.scalar_type() != b.scalar_type() || a.sizes() != b.sizes()) return false;
  const at::Tensor ca = a.contiguous(), cb = b.contiguous();
  return ca.nbytes() == cb.nbytes() &&
         (ca.nbytes() == 0 || std::memcmp(ca.const_data_ptr(), cb.const_data_ptr(), ca.nbytes()) == 0);
}

void fuzz_npy(const fz::fs::path& path, bool mmap) {
  // Both ways of reading a .npy accept the same files and give the same array.
  at::Tensor first, second;
  bool first_ok = false, second_ok = false;
  try {
    first = data::read_npy(path, {.mmap = mmap});
    fz::touch(first);
    first_ok = true;
  } catch (const Error& e) {
    fz::rejected(e);
  }
  try {
    second = data::read_npy(path, {.mmap = !mmap});
    fz::touch(second);
    second_ok = true;
  } catch (const Error& e) {
    fz::rejected(e);
  }
  const bool accepted_mmap = first_ok ? mmap : !mmap;
  fz::expect(first_ok == second_ok, std::string("read_npy accepts the file only with mmap=") + (accepted_mmap ? "true" : "false"));
  if (first_ok && second_ok) fz::expect(same_bytes(first, second), "read_npy gives different arrays mapped and read");
}

void fuzz_npz(const fz::fs::path& path, bool mmap) {
  std::vector<std::string> names;
  try {
    names = data::list_npz(path);
  } catch (const Error& e) {
    fz::rejected(e);
  }
  try {
    const auto arrays = data::read_npz(path, {.mmap = mmap});
    for (const auto& [name, t] : arrays) {
      fz::touch(t);
      fz::expect(std::find(names.begin(), names.end(), name) != names.end(), "read_npz returns '" + name + "', which list_npz does not list");
    }
  } catch (const Error& e) {
    fz::rejected(e);
  }
  // Single entries: the first and the last listed, and one that is not there.
  std::vector<std::string> wanted;
  if (!names.empty()) wanted = {names.front(), names.back()};
  wanted.push_back("no such array");
  for (const auto& name : wanted) {
    try {
      fz::touch(data::read_npz_array(path, name, {.mmap = mmap}));
    } catch (const Error& e) {
      fz::rejected(e);
    }
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::uint8_t sel = size > 0 ? data[0] : 0;
  const bool npz = sel & 1, mmap = sel & 2;
  const fz::fs::path path = fz::input_file(data, size, npz ? "a.npz" : "a.npy", 1);
  if (path.empty()) return 0;
  if (npz) {
    fuzz_npz(path, mmap);
  } else {
    fuzz_npy(path, mmap);
  }
  return 0;
}
