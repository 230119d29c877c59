// The NetCDF format reader over the netCDF C library; see netcdf.h. The library is not thread-safe: every nc_*
// call in the process holds one mutex. Classic-format files are also checked against their own header, because
// the library reads the data of a truncated one as zeros without an error.
#include "bellows/data/netcdf.h"

#include <ATen/ATen.h>
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <netcdf.h>

#include <algorithm>
#include <cerrno>
#include <fstream>
#include <limits>
#include <mutex>
#include <optional>
#include <set>
#include <system_error>

#include "bellows/util/check.h"
#include "bellows/util/suggest.h"  // defines: closest_match

namespace bellows::data {
namespace {

namespace fs = std::filesystem;

// The one lock around the netCDF C library (and the HDF5 library beneath it), process-wide because the
// library's state is.
std::mutex& netcdf_mutex() {
  static std::mutex m;
  return m;
}

// --- classic-format truncation check ---
// The netCDF library reads the data of a truncated classic (CDF-1/2/5) file as zeros without an error, so the
// header's own layout (documented: "NetCDF Classic Format Specification") is read here to learn where the data
// end. netCDF-4 files are HDF5, whose library detects truncation itself.
// The same walk also rejects, before libnetcdf parses the header, what libnetcdf 4.9 does not survive (found by
// fuzzing, tests/fuzz): a name longer than NC_MAX_NAME (nc_inq_dimname then writes past any NC_MAX_NAME + 1
// buffer) and counts of dimensions, attributes or variables that the file's bytes cannot hold (nc_open crashed
// or ran out of memory on a 31-byte CDF-5 header claiming billions of dimensions).
class ClassicHeader {
 public:
  // `bytes`: the file's first bytes (all of them, or a prefix); `file_size`: the whole file's.
  ClassicHeader(std::vector<std::uint8_t> bytes, std::uint64_t file_size) : b_(std::move(bytes)), file_size_(file_size) {}
  // A definite violation of the format found by the walk ("" none).
  const std::string& problem() const { return problem_; }

  // The byte where the last variable's data end, or nullopt when the header cannot be followed.
  std::optional<std::uint64_t> data_end() {
    if (b_.size() < 8 || b_[0] != 'C' || b_[1] != 'D' || b_[2] != 'F') return std::nullopt;
    version_ = b_[3];
    if (version_ != 1 && version_ != 2 && version_ != 5) {
      reject(fmt::format("version byte {} (1, 2 or 5 expected)", version_));
      return std::nullopt;
    }
    pos_ = 4;
    const std::uint64_t numrecs = count();
    // STREAMING (all ones) marks a file still being written. libnetcdf 4.9 reports it as the record dimension's
    // length: 2^32 - 1 time steps in a 926-byte file, and a coordinate read of them asked for 32 GiB (found by
    // fuzzing, tests/data/fuzz/netcdf_streaming_records.nc). A finished file states its count.
    if (ok_ && numrecs == (version_ == 5 ? ~std::uint64_t{0} : 0xffffffffu)) {
      reject(fmt::format("the record count is STREAMING (0x{:x}): a file still being written, not a finished one", numrecs));
      return std::nullopt;
    }
    std::vector<std::uint64_t> dims;
    tag(kDimensionTag, "NC_DIMENSION");
    std::set<std::string> dim_names, var_names;
    for (std::uint64_t n = entries("dimensions"), i = 0; i < n && ok_; ++i) {
      unique(dim_names, name(), "dimensions");
      dims.push_back(count());
    }
    attributes();
    struct Var {
      std::uint64_t begin, bytes;
      bool record;
    };
    std::vector<Var> vars;
    tag(kVariableTag, "NC_VARIABLE");
    for (std::uint64_t n = entries("variables"), i = 0; i < n && ok_; ++i) {
      unique(var_names, name(), "variables");
      const std::uint64_t ndims = entries("dimensions of a variable", version_ == 5 ? 8 : 4);
      std::uint64_t elements = 1;
      bool record = false;
      for (std::uint64_t d = 0; d < ndims && ok_; ++d) {
        const std::uint64_t id = version_ == 5 ? u64() : u32();
        if (ok_ && id >= dims.size()) {
          reject(fmt::format("a variable names dimension {} at byte {}, the file has {}", id, pos_ - 4, dims.size()));
          return std::nullopt;
        }
        if (d == 0 && dims[id] == 0) {
          record = true;
        } else {
          elements *= dims[id];
        }
      }
      attributes();
      const std::uint64_t type = u32();
      const std::uint64_t size = type_size(type);
      count();  // vsize: 32 bits can saturate, so sizes are computed from the shape instead
      const std::uint64_t begin = version_ == 1 ? u32() : u64();
      if (ok_ && size == 0) {
        reject(fmt::format("a variable of unknown type {}", type));
        return std::nullopt;
      }
      vars.push_back({begin, elements * size, record});
    }
    if (!ok_) return std::nullopt;
    std::uint64_t record_size = 0, records = 0, end = pos_;
    for (const auto& v : vars) {
      if (v.record) ++records, record_size += (v.bytes + 3) / 4 * 4;
    }
    if (records == 1) {
      for (const auto& v : vars) {
        if (v.record) record_size = v.bytes;  // a lone record variable is not padded
      }
    }
    for (const auto& v : vars) {
      if (!v.record) {
        end = std::max(end, v.begin + v.bytes);
      } else if (numrecs > 0) {
        end = std::max(end, v.begin + (numrecs - 1) * record_size + v.bytes);
      }
    }
    return end;
  }

 private:
  std::uint64_t u32() {
    if (pos_ + 4 > b_.size()) return fail();
    std::uint64_t v = 0;
    for (int i = 0; i < 4; ++i) v = (v << 8) | b_[pos_++];
    return v;
  }
  std::uint64_t u64() {
    const std::uint64_t hi = u32();
    return (hi << 32) | u32();
  }
  std::uint64_t count() { return version_ == 5 ? u64() : u32(); }
  // The walk cannot go on: past the end of the bytes read. When they are the whole file, the header is cut short.
  std::uint64_t fail() {
    if (ok_ && problem_.empty() && b_.size() >= file_size_) {
      problem_ = fmt::format("the header ends early: an entry at byte {} runs past the file's {} bytes", pos_, file_size_);
    }
    ok_ = false;
    pos_ = b_.size();
    return 0;
  }
  // A list's tag: its own, or ABSENT (zero) followed by a zero count.
  void tag(std::uint64_t expected, const char* name) {
    const std::size_t at = pos_;
    const std::uint64_t t = u32();
    if (ok_ && t != expected && t != 0) reject(fmt::format("tag 0x{:x} at byte {} where {} (0x{:x}) or ABSENT (0) belongs", t, at, name, expected));
    if (ok_ && t == 0) {
      const std::size_t count_at = pos_;
      if (const std::uint64_t n = count(); ok_ && n != 0) reject(fmt::format("ABSENT at byte {} followed by a count of {}", count_at - 4, n));
      pos_ = count_at;  // the list's own loop reads the (zero) count again
    }
  }
  static constexpr std::uint64_t kDimensionTag = 0x0A, kVariableTag = 0x0B, kAttributeTag = 0x0C;
  void skip(std::uint64_t n) {
    const std::uint64_t padded = (n + 3) / 4 * 4;  // everything in the header is padded to 4 bytes
    if (n > b_.size() || padded > b_.size() - pos_) {
      fail();
    } else {
      pos_ += padded;
    }
  }
  std::string name() {
    const std::uint64_t n = count();
    if (ok_ && n > NC_MAX_NAME) {
      reject(fmt::format("a name of {} bytes at byte {} (the format allows {})", n, pos_ - 4, NC_MAX_NAME));
      return {};
    }
    const std::size_t at = pos_;
    skip(n);
    if (!ok_) return {};
    std::string text(reinterpret_cast<const char*>(b_.data() + at), static_cast<std::size_t>(n));
    // libnetcdf reads names as C strings: "time\0" would be a second "time".
    if (text.find('\0') != std::string::npos) reject(fmt::format("a name with a NUL byte at byte {}", at));
    return text;
  }
  // Names must be unique among the dimensions and among the variables: libnetcdf 4.9 accepts a second "time"
  // dimension, and reading a coordinate variable of one by the other's length overran the buffer (fuzzing).
  void unique(std::set<std::string>& seen, const std::string& name, const char* what) {
    if (ok_ && !seen.insert(name).second) reject(fmt::format("two {} named '{}'", what, name));
  }
  // A count of header entries, each at least `bytes` long, that must fit in what is left of the file.
  std::uint64_t entries(const char* what, std::uint64_t bytes = 8) {
    const std::uint64_t n = count();
    if (ok_ && n > (file_size_ - std::min<std::uint64_t>(pos_, file_size_)) / bytes) {
      reject(fmt::format("{} {} at byte {}, more than the file's {} bytes can hold", n, what, pos_, file_size_));
      return 0;
    }
    return n;
  }
  void reject(std::string why) {
    if (problem_.empty()) problem_ = std::move(why);
    fail();
  }
  void attributes() {
    tag(kAttributeTag, "NC_ATTRIBUTE");
    for (std::uint64_t n = entries("attributes"), i = 0; i < n && ok_; ++i) {
      name();
      const std::uint64_t size = type_size(u32());
      const std::uint64_t values = count();
      if (ok_ && size > 0 && values > (file_size_ - std::min<std::uint64_t>(pos_, file_size_)) / size) {
        // The values live in the header: more than the file holds is no NetCDF file (libnetcdf allocated them
        // first: 4 GiB for a 324-byte file, found by fuzzing).
        reject(fmt::format("an attribute of {} values at byte {}, more than the file's {} bytes can hold", values, pos_, file_size_));
      } else if (ok_ && size == 0) {
        reject(fmt::format("an attribute of unknown type at byte {}", pos_ - 8));
      } else if (values > b_.size()) {
        fail();
      } else {
        skip(values * size);
      }
    }
  }
  static std::uint64_t type_size(std::uint64_t type) {
    switch (type) {
      case NC_BYTE:
      case NC_CHAR:
      case NC_UBYTE: return 1;
      case NC_SHORT:
      case NC_USHORT: return 2;
      case NC_INT:
      case NC_FLOAT:
      case NC_UINT: return 4;
      case NC_DOUBLE:
      case NC_INT64:
      case NC_UINT64: return 8;
      default: return 0;
    }
  }

  std::vector<std::uint8_t> b_;
  std::uint64_t file_size_ = 0;
  std::size_t pos_ = 0;
  int version_ = 0;
  bool ok_ = true;
  std::string problem_;
};

// What a classic-format file's header says: where its data end (nullopt: unknown, or not a classic file) and
// a definite violation of the format ("" none).
struct ClassicLayout {
  std::optional<std::uint64_t> data_end;
  std::string problem;
};
ClassicLayout classic_layout(const fs::path& path, std::uint64_t file_size) {
  std::ifstream in(path, std::ios::binary);
  std::vector<std::uint8_t> head(static_cast<std::size_t>(std::min<std::uint64_t>(file_size, std::uint64_t{16} << 20)));
  in.read(reinterpret_cast<char*>(head.data()), static_cast<std::streamsize>(head.size()));
  if (!in) return {};
  ClassicHeader header(std::move(head), file_size);
  ClassicLayout layout;
  layout.data_end = header.data_end();
  layout.problem = header.problem();
  return layout;
}

}  // namespace

struct NetcdfFile::Impl {
  std::string file;  // the path as given, for messages
  fs::path path;
  NetcdfGrid grid;
  int ncid = -1;
  std::int64_t n_time = 0, n_lat = 0, n_lon = 0, n_level = 0;

  // --- the library's calls; the caller holds the mutex ---

  [[noreturn]] void fail(const std::string& message, const std::string& hint, ErrorKind kind = ErrorKind::kData) const {
    BELLOWS_FAIL(kind, fmt::format("{}: {}", file, message), hint);
  }
  void check_nc(int status, const std::string& what) const {
    if (status != NC_NOERR) {
      fail(fmt::format("{}: {}", what, nc_strerror(status)),
           "is the file a complete NetCDF file (classic or netCDF-4)? A truncated copy fails like this too");
    }
  }

  std::vector<std::string> all_dim_names() const {
    int n = 0;
    nc_inq_ndims(ncid, &n);
    std::vector<std::string> names;
    for (int d = 0; d < n; ++d) {
      char name[NC_MAX_NAME + 1] = {};
      if (nc_inq_dimname(ncid, d, name) == NC_NOERR) names.emplace_back(name);
    }
    return names;
  }

  // The length of dimension `name`, or -1 when the file has none (and `required` is false).
  std::int64_t dim_length(const std::string& name, const std::string& option, bool required) const {
    int dimid = -1;
    if (nc_inq_dimid(ncid, name.c_str(), &dimid) != NC_NOERR) {
      if (!required) return -1;
      fail(fmt::format("no dimension '{}'; the file's dimensions: {}", name, fmt::join(all_dim_names(), ", ")),
           fmt::format("set data.netcdf.{} to the file's name for it", option));
    }
    std::size_t len = 0;
    check_nc(nc_inq_dimlen(ncid, dimid, &len), fmt::format("dimension '{}'", name));
    if (len > static_cast<std::size_t>(std::numeric_limits<std::int64_t>::max())) {
      fail(fmt::format("dimension '{}' claims {} values, more than 64-bit signed counts hold", name, len), "the file is corrupt: write it again");
    }
    return static_cast<std::int64_t>(len);
  }

  std::vector<std::string> all_var_names() const {
    int n = 0;
    nc_inq_nvars(ncid, &n);
    std::vector<std::string> names;
    for (int v = 0; v < n; ++v) {
      char name[NC_MAX_NAME + 1] = {};
      if (nc_inq_varname(ncid, v, name) == NC_NOERR) names.emplace_back(name);
    }
    return names;
  }

  std::vector<std::string> var_dims(int varid) const {
    int ndims = 0;
    check_nc(nc_inq_varndims(ncid, varid, &ndims), "variable dimensions");
    std::vector<int> ids(static_cast<std::size_t>(ndims));
    check_nc(nc_inq_vardimid(ncid, varid, ids.data()), "variable dimensions");
    std::vector<std::string> names;
    for (const int id : ids) {
      char name[NC_MAX_NAME + 1] = {};
      check_nc(nc_inq_dimname(ncid, id, name), "dimension name");
      names.emplace_back(name);
    }
    return names;
  }

  // Whether dims are (time, lat, lon) or (time, level, lat, lon), in any order.
  bool is_grid(const std::vector<std::string>& dims) const {
    const auto has = [&](const std::string& d) { return std::find(dims.begin(), dims.end(), d) != dims.end(); };
    const bool base = has(grid.time_dim) && has(grid.lat_dim) && has(grid.lon_dim);
    return base && (dims.size() == 3 || (dims.size() == 4 && has(grid.level_dim)));
  }

  std::string grid_text() const {
    return fmt::format("({}, {}, {}) or ({}, {}, {}, {})", grid.time_dim, grid.lat_dim, grid.lon_dim,
                       grid.time_dim, grid.level_dim, grid.lat_dim, grid.lon_dim);
  }

  NetcdfVariable open_variable(const std::string& name, const std::string& role) const {
    NetcdfVariable v;
    v.name = name;
    if (nc_inq_varid(ncid, name.c_str(), &v.varid) != NC_NOERR) {
      const auto names = all_var_names();
      const auto close = closest_match(name, names);
      fail(fmt::format("no variable '{}'{}; the file's variables: {}", name,
                       close ? fmt::format(" (did you mean '{}'?)", *close) : "", fmt::join(names, ", ")),
           fmt::format("set data.netcdf.{} to variables of the file", role));
    }
    v.dims = var_dims(v.varid);
    if (!is_grid(v.dims)) {
      fail(fmt::format("variable '{}' has dims ({}), but bellows reads {}", name, fmt::join(v.dims, ", "), grid_text()),
           "leave the variable out, or set data.netcdf.time_dim/lat_dim/lon_dim/level_dim to the file's names");
    }
    nc_type type = NC_NAT;
    check_nc(nc_inq_vartype(ncid, v.varid, &type), fmt::format("variable '{}'", name));
    if (type == NC_CHAR || type == NC_STRING || type > NC_STRING) {
      fail(fmt::format("variable '{}' is not numeric", name), "read numeric variables only");
    }
    v.exact_in_float = type == NC_FLOAT || type == NC_SHORT || type == NC_USHORT || type == NC_BYTE || type == NC_UBYTE;
    for (std::size_t i = 0; i < v.dims.size(); ++i) {
      const std::string& d = v.dims[i];
      const int p = static_cast<int>(i);
      if (d == grid.time_dim) v.p_time = p;
      if (d == grid.lat_dim) v.p_lat = p;
      if (d == grid.lon_dim) v.p_lon = p;
      if (d == grid.level_dim) v.p_level = p;
      v.lens.push_back(static_cast<std::size_t>(d == grid.time_dim  ? n_time
                                                : d == grid.lat_dim ? n_lat
                                                : d == grid.lon_dim ? n_lon
                                                                    : n_level));
    }
    v.levels = v.p_level >= 0 ? n_level : 1;

    // Packing (CF): value = raw * scale_factor + add_offset. Missing data: _FillValue, missing_value, and for
    // float/double variables without _FillValue the library's default fill (what unwritten regions hold).
    const auto attribute = [&](const char* att, std::vector<double>& out) {
      std::size_t len = 0;
      if (nc_inq_attlen(ncid, v.varid, att, &len) != NC_NOERR || len == 0) return false;
      out.resize(len);
      check_nc(nc_get_att_double(ncid, v.varid, att, out.data()), fmt::format("attribute {}:{}", name, att));
      return true;
    };
    std::vector<double> values;
    if (attribute("scale_factor", values)) v.scale = values[0];
    if (attribute("add_offset", values)) v.offset = values[0];
    if (attribute("_FillValue", values)) {
      v.missing.push_back(values[0]);
    } else if (type == NC_FLOAT) {
      v.missing.push_back(static_cast<double>(NC_FILL_FLOAT));
    } else if (type == NC_DOUBLE) {
      v.missing.push_back(NC_FILL_DOUBLE);
    }
    if (attribute("missing_value", values)) v.missing.insert(v.missing.end(), values.begin(), values.end());
    return v;
  }

  // A 1-D coordinate variable named like the dimension, if the file has one.
  std::vector<double> coordinate(const std::string& dim, std::int64_t length) const {
    int varid = -1;
    if (length <= 0 || nc_inq_varid(ncid, dim.c_str(), &varid) != NC_NOERR) return {};
    const auto dims = var_dims(varid);
    if (dims.size() != 1 || dims[0] != dim) return {};
    // Exactly `length` values (nc_get_vara: an error when the variable is shorter). nc_get_var read the whole
    // variable into a buffer of `length`: in a file whose coordinate variable is longer than the dimension the
    // caller saw, it wrote past the buffer (found by fuzzing, under valgrind).
    std::vector<double> values(static_cast<std::size_t>(length));
    const std::size_t start = 0, count = static_cast<std::size_t>(length);
    check_nc(nc_get_vara_double(ncid, varid, &start, &count, values.data()), fmt::format("coordinate variable '{}'", dim));
    return values;
  }

  // --- reading: blocks of time steps as float32 [nt, levels, lat, lon], unpacked and checked ---

  at::Tensor read_block(const NetcdfVariable& v, std::int64_t t0, std::int64_t nt) const {
    std::vector<std::size_t> start(v.dims.size(), 0), count = v.lens;
    start[static_cast<std::size_t>(v.p_time)] = static_cast<std::size_t>(t0);
    count[static_cast<std::size_t>(v.p_time)] = static_cast<std::size_t>(nt);
    // The block's size must fit LibTorch's 64-bit counts before it is allocated (a corrupt header can claim lengths
    // whose product overflows; found by fuzzing): a data error, not LibTorch's exception.
    std::int64_t elements = 1;
    for (const std::size_t c : count) {
      if (c > static_cast<std::size_t>(std::numeric_limits<std::int64_t>::max()) ||
          __builtin_mul_overflow(elements, static_cast<std::int64_t>(c), &elements) || elements > std::numeric_limits<std::int64_t>::max() / 8) {
        fail(fmt::format("variable '{}': a block of {} time step(s) of shape [{}] holds more values than 64-bit counts hold", v.name, nt,
                         fmt::join(count, ", ")),
             "the file is corrupt: write it again");
      }
    }
    at::Tensor raw =
        at::empty(std::vector<std::int64_t>(count.begin(), count.end()), v.exact_in_float ? at::kFloat : at::kDouble);
    const int status = v.exact_in_float
                           ? nc_get_vara_float(ncid, v.varid, start.data(), count.data(), raw.data_ptr<float>())
                           : nc_get_vara_double(ncid, v.varid, start.data(), count.data(), raw.data_ptr<double>());
    if (status != NC_NOERR) {
      fail(fmt::format("cannot read variable '{}' at time index {}{}: {}", v.name, t0,
                       nt > 1 ? fmt::format("..{}", t0 + nt - 1) : "", nc_strerror(status)),
           "the file may be truncated or damaged: copy it again");
    }
    raw = v.p_level >= 0 ? raw.permute({v.p_time, v.p_level, v.p_lat, v.p_lon})
                         : raw.permute({v.p_time, v.p_lat, v.p_lon}).unsqueeze(1);
    at::Tensor bad = raw.isnan();
    for (const double m : v.missing) bad.logical_or_(raw == m);
    if (bad.any().item<bool>()) {
      const at::Tensor where = bad.nonzero()[0];
      const auto at = [&](int i) { return where[i].item<std::int64_t>(); };
      fail(fmt::format("variable '{}' has a missing value (NaN, _FillValue or missing_value: {}) at time index {}{}, "
                       "{} index {}, {} index {}",
                       v.name, fmt::join(v.missing, ", "), t0 + at(0),
                       v.p_level >= 0 ? fmt::format(", {} index {}", grid.level_dim, at(1)) : "", grid.lat_dim,
                       at(2), grid.lon_dim, at(3)),
           "bellows does not fill gaps: fill them (e.g. xarray's interpolate_na) or cut those time steps out");
    }
    if (v.scale != 1 || v.offset != 0) raw = raw.to(at::kDouble) * v.scale + v.offset;  // unpacked in float64
    return raw.to(at::kFloat).contiguous();
  }

  // Opens the file and reads its dimensions; the caller holds the mutex.
  void open() {
    std::error_code ec;
    BELLOWS_CHECK_DATA(!fs::is_directory(path, ec), fmt::format("{} is a directory, not a NetCDF file", file),
                       "give data.path the NetCDF file (.nc) itself");
    BELLOWS_CHECK_DATA(fs::is_regular_file(path, ec), fmt::format("{}: no such file", file),
                       fmt::format("check the path (relative paths start at {})", fs::current_path().string()));
    // A classic-format header is walked before libnetcdf parses it (ClassicHeader says why).
    const std::uint64_t size = fs::file_size(path, ec);
    const ClassicLayout layout = classic_layout(path, ec ? 0 : size);
    if (!layout.problem.empty()) {
      fail(fmt::format("not a valid NetCDF classic header: {}", layout.problem), "the file is corrupt or not NetCDF: write it again");
    }
    const int opened = nc_open(file.c_str(), NC_NOWRITE, &ncid);
    // Positive codes are the system's errno: an unreadable file is not a corrupt one.
    if (opened == EACCES || opened == EPERM) {
      fail(fmt::format("cannot open: {}", nc_strerror(opened)), "check the file's permissions");
    }
    check_nc(opened, "cannot open as NetCDF");
    try {
      int format = 0;
      check_nc(nc_inq_format(ncid, &format), "cannot read the format");
      if (format == NC_FORMAT_CLASSIC || format == NC_FORMAT_64BIT_OFFSET || format == NC_FORMAT_CDF5) {
        if (const auto end = layout.data_end; end && *end > size) {
          fail(fmt::format("truncated: its header places data up to byte {}, the file has {} bytes", *end, size),
               "the file is incomplete (an interrupted copy or download?): copy it again");
        }
      }
      n_time = dim_length(grid.time_dim, "time_dim", true);
      n_lat = dim_length(grid.lat_dim, "lat_dim", true);
      n_lon = dim_length(grid.lon_dim, "lon_dim", true);
      n_level = std::max<std::int64_t>(0, dim_length(grid.level_dim, "level_dim", false));
    } catch (...) {
      nc_close(ncid);
      ncid = -1;
      throw;
    }
  }
};

NetcdfFile::NetcdfFile(fs::path path, NetcdfGrid grid) : impl_(std::make_unique<Impl>()) {
  impl_->file = path.string();
  impl_->path = std::move(path);
  impl_->grid = std::move(grid);
  const std::lock_guard lock(netcdf_mutex());
  impl_->open();
}

NetcdfFile::~NetcdfFile() {
  if (impl_ && impl_->ncid >= 0) {
    const std::lock_guard lock(netcdf_mutex());
    nc_close(impl_->ncid);
  }
}

const std::string& NetcdfFile::file() const {
  return impl_->file;
}
const NetcdfGrid& NetcdfFile::grid() const {
  return impl_->grid;
}
std::int64_t NetcdfFile::time_steps() const {
  return impl_->n_time;
}
std::int64_t NetcdfFile::lat_size() const {
  return impl_->n_lat;
}
std::int64_t NetcdfFile::lon_size() const {
  return impl_->n_lon;
}
std::int64_t NetcdfFile::level_size() const {
  return impl_->n_level;
}

std::vector<std::string> NetcdfFile::variable_names() const {
  const std::lock_guard lock(netcdf_mutex());
  return impl_->all_var_names();
}

std::vector<std::string> NetcdfFile::dims_of(const std::string& name) const {
  const std::lock_guard lock(netcdf_mutex());
  int varid = -1;
  impl_->check_nc(nc_inq_varid(impl_->ncid, name.c_str(), &varid), fmt::format("variable '{}'", name));
  return impl_->var_dims(varid);
}

bool NetcdfFile::is_grid(const std::vector<std::string>& dims) const {
  return impl_->is_grid(dims);
}

std::string NetcdfFile::grid_text() const {
  return impl_->grid_text();
}

NetcdfVariable NetcdfFile::variable(const std::string& name, const std::string& option) const {
  const std::lock_guard lock(netcdf_mutex());
  return impl_->open_variable(name, option);
}

std::vector<double> NetcdfFile::coordinate(const std::string& dim, std::int64_t length) const {
  const std::lock_guard lock(netcdf_mutex());
  return impl_->coordinate(dim, length);
}

at::Tensor NetcdfFile::read_block(const NetcdfVariable& v, std::int64_t t0, std::int64_t steps) const {
  const std::lock_guard lock(netcdf_mutex());
  return impl_->read_block(v, t0, steps);
}

}  // namespace bellows::data
