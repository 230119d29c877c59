// NumPy arrays: .npy files and .npz archives (np.savez, np.savez_compressed) read into tensors, memory-mapped
// by default, and written back (for tests, examples and `bellows` outputs). The Dataset over such arrays is in
// npy_dataset.h.
//   auto x = read_npy("x.npy");  // mmapped; pages are read when touched
#pragma once

#include <ATen/core/Tensor.h>

#include <filesystem>
#include <map>
#include <string>
#include <vector>

namespace bellows::data {

// Supported: format versions 1.0, 2.0 and 3.0; little-endian ('<') or byte-order-free ('|') dtypes f2 f4 f8,
// i1 i2 i4 i8, u1 and b1 (bool), in C order. Anything else is a kData error that names the file and dtype.
struct NpyReadOptions {
  // true: .npy files and STORED .npz entries are memory-mapped (PROT_READ, MAP_PRIVATE) and the tensor lives
  // over the mapping, which stays alive as long as any view of it does. Such tensors are READ-ONLY memory:
  // writing into them in place faults; clone() first. Entries whose data are not aligned to their item size
  // inside the archive, and DEFLATE entries, are always read into ordinary tensors.
  // false: every array is read into an ordinary (writable) tensor, and STORED entries have their CRC checked.
  bool mmap = true;
};

// One .npy file. kData errors name the file and the byte offset of what is wrong.
at::Tensor read_npy(const std::filesystem::path& path, NpyReadOptions options = {});

// Every array of an .npz archive, by entry name without ".npy" ("x.npy" -> "x").
std::map<std::string, at::Tensor> read_npz(const std::filesystem::path& path, NpyReadOptions options = {});
// One array of an .npz archive (only that entry is read or inflated); kData error listing the names when absent.
at::Tensor read_npz_array(const std::filesystem::path& path, const std::string& name, NpyReadOptions options = {});
// The array names of an .npz archive, in archive order.
std::vector<std::string> list_npz(const std::filesystem::path& path);

// C-order little-endian .npy, format version 1.0 (2.0 only if the header needs it), written durably and
// atomically (util/atomic_file.h). The tensor is copied to the CPU and made contiguous when it is not.
void write_npy(const std::filesystem::path& path, const at::Tensor& t);
struct NpzWriteOptions {
  bool force_zip64 = false;  // ZIP64 records even for small archives (tests; other readers' compatibility)
};
// An uncompressed .npz (like np.savez), entry "name.npy" per array, whose array data are 64-byte aligned in
// the file so that read_npz can map them; ZIP64 records only where sizes or offsets need them. np.load reads it.
// Written durably and atomically, like write_npy.
void write_npz(const std::filesystem::path& path, const std::map<std::string, at::Tensor>& arrays,
               NpzWriteOptions options = {});

}  // namespace bellows::data
