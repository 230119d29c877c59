// .npy and uncompressed .npz files written from tensors; see npy.h. Both go through util/atomic_file.h (a
// temporary file beside the target, fsynced and renamed), so a reader never sees half an array. The .npz
// layout aligns every array's data to 64 bytes so that read_npz can map them.
#include "bellows/data/npy.h"

#include <ATen/ATen.h>
#include <fmt/format.h>

#include "bellows/util/atomic_file.h"  // defines: AtomicFileWriter
#include "bellows/util/check.h"
#include "data/npy_internal.h"  // defines: put_u16/u32/u64, kNpyMagic, zip signatures, crc32_of

namespace bellows::data {
using namespace npy_detail;

namespace {

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

struct WrittenEntry {
  std::string name;
  std::uint32_t crc;
  std::uint64_t size;
  std::uint64_t local_offset;
};

// --- the .npz layout: per array a local header, its NPY header and data; then the central directory and end ---

// A local header's extra fields: ZIP64 sizes where needed, then the padding that aligns the entry's data.
std::string npz_local_extra(const WrittenEntry& e, bool zip64) {
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
  return extra;
}

// An entry's local header with its name and extra fields, followed by the NPY header (the array data follow).
std::string npz_local_record(const WrittenEntry& e, const std::string& header, bool zip64) {
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
  const std::string extra = npz_local_extra(e, zip64);
  put_u16(local, static_cast<std::uint16_t>(e.name.size()));
  put_u16(local, static_cast<std::uint16_t>(extra.size()));
  local.append(e.name).append(extra).append(header);
  return local;
}

// Writes one array, stored (not compressed), as entry `name`.npy; what the central directory needs of it.
WrittenEntry write_npz_entry(AtomicFileWriter& w, const std::string& name, const at::Tensor& tensor, bool force_zip64) {
  const at::Tensor c = cpu_contiguous(tensor);
  const std::string header = npy_header_bytes(c);
  WrittenEntry e{name + ".npy", 0, header.size() + c.nbytes(), w.offset()};
  e.crc = crc32_of(crc32_of(0, reinterpret_cast<const std::uint8_t*>(header.data()), header.size()),
                   static_cast<const std::uint8_t*>(c.data_ptr()), c.nbytes());
  const bool zip64 = force_zip64 || e.size >= 0xffffffff;
  w.write(npz_local_record(e, header, zip64));
  w.write(c.data_ptr(), c.nbytes());
  return e;
}

// An entry's central directory record, with a ZIP64 extra field for a size or offset that needs 64 bits.
std::string npz_central_record(const WrittenEntry& e, bool force_zip64) {
  const bool big_size = force_zip64 || e.size >= 0xffffffff;
  const bool big_offset = force_zip64 || e.local_offset >= 0xffffffff;
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
  return r;
}

// The ZIP64 end record and its locator (when the counts or offsets need them, or forced), then the end record.
// `end_offset`: where these records start.
std::string npz_end_records(std::uint64_t count, std::uint64_t dir_size, std::uint64_t dir_offset, std::uint64_t end_offset,
                            bool force_zip64) {
  const bool zip64_end = force_zip64 || count >= 0xffff || dir_size >= 0xffffffff || dir_offset >= 0xffffffff;
  std::string end;
  if (zip64_end) {
    const std::uint64_t z_offset = end_offset;
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
  return end;
}

}  // namespace

// --- public API ---

void write_npy(const std::filesystem::path& path, const at::Tensor& t) {
  const at::Tensor c = cpu_contiguous(t);
  const std::string header = npy_header_bytes(c);
  AtomicFileWriter w(path);  // durable and atomic: a reader never sees half an array
  w.write(header);
  w.write(c.data_ptr(), c.nbytes());
  w.commit();
}

void write_npz(const std::filesystem::path& path, const std::map<std::string, at::Tensor>& arrays,
               NpzWriteOptions options) {
  AtomicFileWriter w(path);  // durable and atomic: a reader never sees half an array
  std::vector<WrittenEntry> written;
  for (const auto& [name, tensor] : arrays) written.push_back(write_npz_entry(w, name, tensor, options.force_zip64));
  const std::uint64_t dir_offset = w.offset();
  for (const auto& e : written) w.write(npz_central_record(e, options.force_zip64));
  const std::uint64_t dir_size = w.offset() - dir_offset;
  w.write(npz_end_records(written.size(), dir_size, dir_offset, w.offset(), options.force_zip64));
  w.commit();
}

}  // namespace bellows::data
