// NetCDF variables as a dataset; see netcdf.h. Reading goes through the netCDF C library, which is not
// thread-safe: every nc_* call in the process holds one mutex. The normal case (a regional grid, a few
// variables) is loaded into memory at construction, so loader workers then gather without the library.
#include "bellows/data/netcdf.h"

#include <ATen/ATen.h>
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <netcdf.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <thread>

#include "bellows/util/check.h"
#include "bellows/util/suggest.h"

namespace bellows::data {
namespace {

namespace fs = std::filesystem;

// The one lock around the netCDF C library (and the HDF5 library beneath it), process-wide because the
// library's state is.
std::mutex& netcdf_mutex() {
  static std::mutex m;
  return m;
}

constexpr int kStatsVersion = 1;
constexpr std::int64_t kBlockBytes = std::int64_t{64} << 20;  // read this much (as float64) per library call

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

struct Variable {
  std::string name;
  int varid = -1;
  std::vector<std::string> dims;  // in file order
  std::vector<std::size_t> lens;
  int p_time = -1, p_level = -1, p_lat = -1, p_lon = -1;  // positions of the dimensions in `dims`
  std::int64_t levels = 1;
  double scale = 1, offset = 0;
  bool exact_in_float = false;  // raw values read as float32 without loss (float, and integers up to 16 bits)
  std::vector<double> missing;  // raw values that mean "no data"
  std::int64_t channel0 = 0;    // its first channel among all channels read
};

// Channel statistics over the file, accumulated block by block in float64 (Chan et al.'s pairwise update).
struct Moments {
  double count = 0, mean = 0, m2 = 0;
  void add(const at::Tensor& block) {
    const at::Tensor x = block.to(at::kDouble);
    const auto n = static_cast<double>(x.numel());
    if (n == 0) return;
    const auto m = x.mean().item<double>();
    const auto m2_block = (x - m).square().sum().item<double>();
    const double total = count + n, delta = m - mean;
    mean += delta * n / total;
    m2 += m2_block + delta * delta * count * n / total;
    count = total;
  }
  double std() const { return count > 0 ? std::sqrt(m2 / count) : 0; }
};

std::string level_text(double v) {
  return fmt::format("{}", v);
}  // 850.0 -> "850", 0.5 -> "0.5"

std::uint64_t fnv1a(const std::string& s) {
  std::uint64_t h = 1469598103934665603ull;
  for (const unsigned char c : s) h = (h ^ c) * 1099511628211ull;
  return h;
}

struct FileStamp {
  std::uint64_t size = 0;
  std::int64_t mtime_ns = 0;
};

FileStamp stamp_of(const fs::path& p) {
  struct stat st {};
  if (::stat(p.c_str(), &st) != 0) return {};
  return {static_cast<std::uint64_t>(st.st_size),
          static_cast<std::int64_t>(st.st_mtim.tv_sec) * 1000000000 + st.st_mtim.tv_nsec};
}

fs::path cache_dir_path(const fs::path& file) {
  const char* cache = std::getenv("BELLOWS_CACHE");
  const char* home = std::getenv("HOME");
  if (!(cache && *cache) && !(home && *home)) return {};
  const fs::path root = cache && *cache ? fs::path(cache) : fs::path(home) / ".cache" / "bellows";
  const std::string absolute = fs::absolute(file).lexically_normal().string();
  return root / "stats" / fmt::format("{}-{:016x}.json", file.filename().string(), fnv1a(absolute));
}

// --- classic-format truncation check ---
// The netCDF library reads the data of a truncated classic (CDF-1/2/5) file as zeros without an error, so the
// header's own layout (documented: "NetCDF Classic Format Specification") is read here to learn where the data
// end. netCDF-4 files are HDF5, whose library detects truncation itself.
class ClassicHeader {
 public:
  explicit ClassicHeader(std::vector<std::uint8_t> bytes) : b_(std::move(bytes)) {}

  // The byte where the last variable's data end, or nullopt when the header cannot be followed.
  std::optional<std::uint64_t> data_end() {
    if (b_.size() < 8 || b_[0] != 'C' || b_[1] != 'D' || b_[2] != 'F') return std::nullopt;
    version_ = b_[3];
    if (version_ != 1 && version_ != 2 && version_ != 5) return std::nullopt;
    pos_ = 4;
    const std::uint64_t numrecs = count();
    const bool streaming = numrecs == (version_ == 5 ? ~std::uint64_t{0} : 0xffffffffu);
    std::vector<std::uint64_t> dims;
    u32();  // NC_DIMENSION, or ABSENT's zero
    for (std::uint64_t n = count(), i = 0; i < n && ok_; ++i) {
      name();
      dims.push_back(count());
    }
    attributes();
    struct Var {
      std::uint64_t begin, bytes;
      bool record;
    };
    std::vector<Var> vars;
    u32();  // NC_VARIABLE, or ABSENT's zero
    for (std::uint64_t n = count(), i = 0; i < n && ok_; ++i) {
      name();
      const std::uint64_t ndims = count();
      std::uint64_t elements = 1;
      bool record = false;
      for (std::uint64_t d = 0; d < ndims && ok_; ++d) {
        const std::uint64_t id = version_ == 5 ? u64() : u32();
        if (id >= dims.size()) return std::nullopt;
        if (d == 0 && dims[id] == 0) {
          record = true;
        } else {
          elements *= dims[id];
        }
      }
      attributes();
      const std::uint64_t size = type_size(u32());
      count();  // vsize: 32 bits can saturate, so sizes are computed from the shape instead
      const std::uint64_t begin = version_ == 1 ? u32() : u64();
      if (size == 0) return std::nullopt;
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
      } else if (!streaming && numrecs > 0) {
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
  std::uint64_t fail() {
    ok_ = false;
    pos_ = b_.size();
    return 0;
  }
  void skip(std::uint64_t n) {
    const std::uint64_t padded = (n + 3) / 4 * 4;  // everything in the header is padded to 4 bytes
    if (n > b_.size() || padded > b_.size() - pos_) {
      fail();
    } else {
      pos_ += padded;
    }
  }
  void name() { skip(count()); }
  void attributes() {
    u32();  // NC_ATTRIBUTE, or ABSENT's zero
    for (std::uint64_t n = count(), i = 0; i < n && ok_; ++i) {
      name();
      const std::uint64_t size = type_size(u32());
      const std::uint64_t values = count();
      if (size == 0 || values > b_.size()) {
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
  std::size_t pos_ = 0;
  int version_ = 0;
  bool ok_ = true;
};

// Where the data of a classic-format file end according to its header (nullopt: unknown).
std::optional<std::uint64_t> classic_data_end(const fs::path& path, std::uint64_t file_size) {
  std::ifstream in(path, std::ios::binary);
  std::vector<std::uint8_t> head(static_cast<std::size_t>(std::min<std::uint64_t>(file_size, std::uint64_t{16} << 20)));
  in.read(reinterpret_cast<char*>(head.data()), static_cast<std::streamsize>(head.size()));
  if (!in) return std::nullopt;
  return ClassicHeader(std::move(head)).data_end();
}

}  // namespace

struct NetcdfDataset::Impl {
  NetcdfOptions options;
  std::string file;  // the path as given, for messages
  int ncid = -1;     // open while samples are read from the file
  std::int64_t n_time = 0, n_lat = 0, n_lon = 0, n_level = 0;
  std::vector<Variable> vars;  // inputs, then targets that are not inputs
  std::vector<std::size_t> input_vars, target_vars;
  std::vector<std::string> channels, input_channels, target_channels;
  std::vector<std::int64_t> input_index, target_index;  // into `channels`
  bool inputs_are_all = false, targets_are_all = false;
  std::vector<ChannelStats> stats;  // per channel; empty without normalisation
  at::Tensor mean, inv_std;         // [channels, 1, 1] float32
  at::Tensor data;                  // [time, channels, lat, lon] float32, normalised; undefined when streaming
  std::vector<double> lat, lon, level_values;
  fs::path cache_path;

  // --- opening: dimensions, variables, coordinates (the caller holds the mutex) ---

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
    const bool base = has(options.time_dim) && has(options.lat_dim) && has(options.lon_dim);
    return base && (dims.size() == 3 || (dims.size() == 4 && has(options.level_dim)));
  }

  std::string grid_text() const {
    return fmt::format("({}, {}, {}) or ({}, {}, {}, {})", options.time_dim, options.lat_dim, options.lon_dim,
                       options.time_dim, options.level_dim, options.lat_dim, options.lon_dim);
  }

  Variable open_variable(const std::string& name, const std::string& role) const {
    Variable v;
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
      if (d == options.time_dim) v.p_time = p;
      if (d == options.lat_dim) v.p_lat = p;
      if (d == options.lon_dim) v.p_lon = p;
      if (d == options.level_dim) v.p_level = p;
      v.lens.push_back(static_cast<std::size_t>(d == options.time_dim  ? n_time
                                                : d == options.lat_dim ? n_lat
                                                : d == options.lon_dim ? n_lon
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
    std::vector<double> values(static_cast<std::size_t>(length));
    check_nc(nc_get_var_double(ncid, varid, values.data()), fmt::format("coordinate variable '{}'", dim));
    return values;
  }

  // --- reading: blocks of time steps as float32 [nt, levels, lat, lon], unpacked and checked ---

  at::Tensor read_block(const Variable& v, std::int64_t t0, std::int64_t nt) const {
    std::vector<std::size_t> start(v.dims.size(), 0), count = v.lens;
    start[static_cast<std::size_t>(v.p_time)] = static_cast<std::size_t>(t0);
    count[static_cast<std::size_t>(v.p_time)] = static_cast<std::size_t>(nt);
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
                       v.p_level >= 0 ? fmt::format(", {} index {}", options.level_dim, at(1)) : "", options.lat_dim,
                       at(2), options.lon_dim, at(3)),
           "bellows does not fill gaps: fill them (e.g. xarray's interpolate_na) or cut those time steps out");
    }
    if (v.scale != 1 || v.offset != 0) raw = raw.to(at::kDouble) * v.scale + v.offset;  // unpacked in float64
    return raw.to(at::kFloat).contiguous();
  }

  std::int64_t block_steps(const Variable& v) const {
    return std::max<std::int64_t>(1, kBlockBytes / (v.levels * n_lat * n_lon * 8));
  }

  // One pass over the file: every variable into `data` (when `keep`), statistics into `moments` (when given).
  void read_all(bool keep, std::vector<Moments>* moments) {
    if (keep) data = at::empty({n_time, static_cast<std::int64_t>(channels.size()), n_lat, n_lon}, at::kFloat);
    for (const Variable& v : vars) {
      for (std::int64_t t0 = 0; t0 < n_time; t0 += block_steps(v)) {
        const std::int64_t nt = std::min(block_steps(v), n_time - t0);
        const at::Tensor block = read_block(v, t0, nt);
        if (keep) data.narrow(0, t0, nt).narrow(1, v.channel0, v.levels).copy_(block);
        if (moments) {
          for (std::int64_t l = 0; l < v.levels; ++l) {
            (*moments)[static_cast<std::size_t>(v.channel0 + l)].add(block.select(1, l));
          }
        }
      }
    }
  }

  // The channels of `which` at time t, read from the file: [channels, lat, lon], normalised.
  at::Tensor read_sample(const std::vector<std::size_t>& which, const std::vector<std::int64_t>& index,
                         std::int64_t t) const {
    std::vector<at::Tensor> parts;
    {
      const std::lock_guard lock(netcdf_mutex());
      for (const std::size_t i : which) parts.push_back(read_block(vars[i], t, 1)[0]);
    }
    at::Tensor x = at::cat(parts, 0);
    if (!stats.empty()) {
      const at::Tensor idx = at::tensor(index);
      x.sub_(mean.index_select(0, idx)).mul_(inv_std.index_select(0, idx));
    }
    return x;
  }

  // --- statistics cache ---

  nlohmann::json cache_key() const {
    const FileStamp s = stamp_of(options.path);
    std::vector<std::string> names;
    for (const auto& v : vars) names.push_back(v.name);
    return {{"size", s.size}, {"mtime_ns", s.mtime_ns}, {"variables", names}, {"channels", channels}};
  }

  bool read_cache(const fs::path& p) {
    try {
      return read_cache_or_throw(p);
    } catch (const nlohmann::json::exception&) {
      return false;  // not our JSON: recompute and overwrite
    }
  }
  bool read_cache_or_throw(const fs::path& p) {
    std::ifstream in(p);
    if (!in) return false;
    const nlohmann::json j = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
    if (!j.is_object() || j.value("version", 0) != kStatsVersion || !j.contains("key") || j["key"] != cache_key() ||
        !j.contains("mean") || !j.contains("std")) {
      return false;
    }
    const auto& means = j["mean"];
    const auto& stds = j["std"];
    if (!means.is_array() || !stds.is_array() || means.size() != channels.size() || stds.size() != channels.size()) {
      return false;
    }
    std::vector<ChannelStats> read;
    for (std::size_t c = 0; c < channels.size(); ++c) {
      if (!means[c].is_number() || !stds[c].is_number()) return false;
      read.push_back({channels[c], means[c].get<double>(), stds[c].get<double>()});
    }
    stats = std::move(read);
    return true;
  }

  // Written to a temporary file and renamed, so a reader (another rank) never sees half of it.
  bool write_cache(const fs::path& p) const {
    nlohmann::json j = {
        {"version", kStatsVersion}, {"file", fs::absolute(options.path).string()}, {"key", cache_key()}};
    std::vector<double> means, stds;
    for (const auto& s : stats) {
      means.push_back(s.mean);
      stds.push_back(s.std);
    }
    j["mean"] = means;
    j["std"] = stds;
    std::error_code ec;
    if (p.has_parent_path()) fs::create_directories(p.parent_path(), ec);
    fs::path tmp = p;
    tmp += fmt::format(".tmp-{}-{:x}", ::getpid(), std::hash<std::thread::id>{}(std::this_thread::get_id()));
    {
      std::ofstream out(tmp, std::ios::trunc);
      out << j.dump(2) << "\n";
      if (!out.flush()) {
        fs::remove(tmp, ec);
        return false;
      }
    }
    fs::rename(tmp, p, ec);
    if (ec) fs::remove(tmp, ec);
    return !ec;
  }

  // Statistics from the cache when it matches the file; otherwise computed (by `compute`) and cached.
  template <class Compute>
  void load_stats(Compute&& compute) {
    std::vector<fs::path> candidates;
    fs::path target;
    if (!options.stats_cache.empty()) {
      candidates = {options.stats_cache};
      target = options.stats_cache;
    } else {
      fs::path beside = options.path;
      beside += ".stats.json";
      const fs::path dir = beside.has_parent_path() ? beside.parent_path() : fs::path(".");
      const fs::path elsewhere = cache_dir_path(options.path);
      candidates = {beside};
      if (!elsewhere.empty()) candidates.push_back(elsewhere);
      target = ::access(dir.c_str(), W_OK) == 0 ? beside : elsewhere;
    }
    for (const auto& p : candidates) {
      if (read_cache(p)) {
        cache_path = p;
        return;
      }
    }
    compute();
    cache_path = target;
    const bool written = !target.empty() && write_cache(target);
    // A cache the user named must work; the default location is a convenience.
    BELLOWS_CHECK_RESOURCE(written || options.stats_cache.empty(),
                           fmt::format("cannot write the statistics cache {}", options.stats_cache.string()),
                           "set data.netcdf.stats_cache to a writable path, or leave it empty");
    if (!written) cache_path.clear();
  }

  void set_normalisation() {
    std::vector<float> m, s;
    for (const auto& c : stats) {
      m.push_back(static_cast<float>(c.mean));
      s.push_back(static_cast<float>(c.std > 0 ? 1.0 / c.std : 1.0));
    }
    const auto n = static_cast<std::int64_t>(stats.size());
    mean = at::tensor(m).view({n, 1, 1});
    inv_std = at::tensor(s).view({n, 1, 1});
  }

  void open();
};

void NetcdfDataset::Impl::open() {
  file = options.path.string();
  BELLOWS_CHECK_CONFIG(options.horizon >= 0, fmt::format("data.netcdf.horizon is {}", options.horizon),
                       "set a horizon of 0 (same time step) or more");
  std::error_code ec;
  BELLOWS_CHECK_DATA(fs::is_regular_file(options.path, ec), fmt::format("{}: no such file", file),
                     fmt::format("check the path (relative paths start at {})", fs::current_path().string()));

  const std::lock_guard lock(netcdf_mutex());
  check_nc(nc_open(file.c_str(), NC_NOWRITE, &ncid), "cannot open as NetCDF");
  try {
    int format = 0;
    check_nc(nc_inq_format(ncid, &format), "cannot read the format");
    if (format == NC_FORMAT_CLASSIC || format == NC_FORMAT_64BIT_OFFSET || format == NC_FORMAT_CDF5) {
      const std::uint64_t size = fs::file_size(options.path);
      const auto end = classic_data_end(options.path, size);
      if (end && *end > size) {
        fail(fmt::format("truncated: its header places data up to byte {}, the file has {} bytes", *end, size),
             "the file is incomplete (an interrupted copy or download?): copy it again");
      }
    }
    // --- dimensions and variables ---
    n_time = dim_length(options.time_dim, "time_dim", true);
    n_lat = dim_length(options.lat_dim, "lat_dim", true);
    n_lon = dim_length(options.lon_dim, "lon_dim", true);
    n_level = std::max<std::int64_t>(0, dim_length(options.level_dim, "level_dim", false));
    std::vector<std::string> inputs = options.variables;
    if (inputs.empty()) {
      std::vector<std::string> described;
      for (const auto& name : all_var_names()) {
        int varid = -1;
        nc_inq_varid(ncid, name.c_str(), &varid);
        const auto dims = var_dims(varid);
        if (is_grid(dims)) inputs.push_back(name);
        described.push_back(fmt::format("{}({})", name, fmt::join(dims, ", ")));
      }
      if (inputs.empty()) {
        fail(fmt::format("no variable has dims {}; the file's variables: {}", grid_text(), fmt::join(described, ", ")),
             "set data.netcdf.time_dim/lat_dim/lon_dim/level_dim to the file's dimension names");
      }
    }
    const std::vector<std::string> targets = options.targets.empty() ? inputs : options.targets;
    // All variables share the file's time/lat/lon dimensions (checked by name in open_variable), so their
    // grids agree by construction.
    const auto add = [&](const std::string& name, const std::string& role) {
      for (std::size_t i = 0; i < vars.size(); ++i) {
        if (vars[i].name == name) return i;
      }
      vars.push_back(open_variable(name, role));
      return vars.size() - 1;
    };
    for (const auto& name : inputs) input_vars.push_back(add(name, "variables"));
    for (const auto& name : targets) target_vars.push_back(add(name, "targets"));

    lat = coordinate(options.lat_dim, n_lat);
    lon = coordinate(options.lon_dim, n_lon);
    level_values = coordinate(options.level_dim, n_level);
    for (auto& v : vars) {
      v.channel0 = static_cast<std::int64_t>(channels.size());
      for (std::int64_t l = 0; l < v.levels; ++l) {
        channels.push_back(v.p_level < 0 ? v.name
                                         : fmt::format("{}@{}", v.name,
                                                       level_values.empty()
                                                           ? fmt::format("{}", l)
                                                           : level_text(level_values[static_cast<std::size_t>(l)])));
      }
    }
    const auto channels_of = [&](const std::vector<std::size_t>& which, std::vector<std::string>& names,
                                 std::vector<std::int64_t>& index) {
      for (const std::size_t i : which) {
        for (std::int64_t l = 0; l < vars[i].levels; ++l) {
          index.push_back(vars[i].channel0 + l);
          names.push_back(channels[static_cast<std::size_t>(vars[i].channel0 + l)]);
        }
      }
    };
    channels_of(input_vars, input_channels, input_index);
    channels_of(target_vars, target_channels, target_index);
    const auto is_all = [&](const std::vector<std::int64_t>& index) {
      if (index.size() != channels.size()) return false;
      for (std::size_t c = 0; c < index.size(); ++c) {
        if (index[c] != static_cast<std::int64_t>(c)) return false;
      }
      return true;
    };
    inputs_are_all = is_all(input_index);
    targets_are_all = is_all(target_index);

    BELLOWS_CHECK_CONFIG(
        options.horizon < n_time,
        fmt::format("{}: data.netcdf.horizon is {}, but the file has {} time steps", file, options.horizon, n_time),
        "choose a horizon smaller than the number of time steps");

    // --- values and statistics: one pass over the file ---
    const auto bytes =
        static_cast<double>(n_time) * static_cast<double>(channels.size()) * static_cast<double>(n_lat * n_lon) * 4;
    const bool keep = bytes <= static_cast<double>(options.memory_limit_bytes);
    bool loaded = false;
    if (options.normalize) {
      load_stats([&] {
        std::vector<Moments> moments(channels.size());
        read_all(keep, &moments);
        loaded = keep;
        for (std::size_t c = 0; c < channels.size(); ++c) {
          stats.push_back({channels[c], moments[c].mean, moments[c].std()});
        }
      });
      set_normalisation();
    }
    if (keep && !loaded) read_all(true, nullptr);
    if (keep) {
      if (!stats.empty()) data.sub_(mean.unsqueeze(0)).mul_(inv_std.unsqueeze(0));
      nc_close(ncid);
      ncid = -1;
    }
  } catch (...) {
    nc_close(ncid);
    ncid = -1;
    throw;
  }
}

NetcdfDataset::NetcdfDataset(NetcdfOptions options) : impl_(std::make_unique<Impl>()) {
  impl_->options = std::move(options);
  impl_->open();
}

NetcdfDataset::~NetcdfDataset() {
  if (impl_ && impl_->ncid >= 0) {
    const std::lock_guard lock(netcdf_mutex());
    nc_close(impl_->ncid);
  }
}

std::int64_t NetcdfDataset::size() const {
  return impl_->n_time - impl_->options.horizon;
}

Example NetcdfDataset::get(std::int64_t index, FetchContext& context) const {
  const Impl& d = *impl_;
  BELLOWS_CHECK(index >= 0 && index < size(), fmt::format("{}: sample {} out of range [0, {})", d.file, index, size()),
                "report this bug");
  const auto start = std::chrono::steady_clock::now();
  const std::int64_t t = index, ty = index + d.options.horizon;
  Example e;
  if (d.data.defined()) {
    e.emplace("x", d.inputs_are_all ? d.data[t].clone() : d.data[t].index_select(0, at::tensor(d.input_index)));
    e.emplace("y", d.targets_are_all ? d.data[ty].clone() : d.data[ty].index_select(0, at::tensor(d.target_index)));
  } else {
    e.emplace("x", d.read_sample(d.input_vars, d.input_index, t));
    e.emplace("y", d.read_sample(d.target_vars, d.target_index, ty));
  }
  context.times.read += seconds_since(start);
  return e;
}

Batch NetcdfDataset::get_batch(std::span<const std::int64_t> indices, FetchContext& context) const {
  const Impl& d = *impl_;
  if (!d.data.defined()) return Dataset::get_batch(indices, context);
  const auto start = std::chrono::steady_clock::now();
  const at::Tensor t = at::tensor(std::vector<std::int64_t>(indices.begin(), indices.end()));
  if (t.numel() > 0) {
    BELLOWS_CHECK(t.min().item<std::int64_t>() >= 0 && t.max().item<std::int64_t>() < size(),
                  fmt::format("{}: a sample index out of range [0, {})", d.file, size()), "report this bug");
  }
  // One gather per tensor: rows t (and t + horizon) and the channels of x (and y).
  const auto gather = [&](const at::Tensor& rows, bool all, const std::vector<std::int64_t>& channels) {
    return all ? d.data.index_select(0, rows) : d.data.index({rows.unsqueeze(1), at::tensor(channels).unsqueeze(0)});
  };
  Batch b;
  b.size = static_cast<std::int64_t>(indices.size());
  b.tensors.emplace("x", gather(t, d.inputs_are_all, d.input_index));
  b.tensors.emplace("y", gather(t + d.options.horizon, d.targets_are_all, d.target_index));
  context.times.read += seconds_since(start);
  return b;
}

std::string NetcdfDataset::describe(std::int64_t index) const {
  return fmt::format("{} time index {} (target {})", impl_->file, index, index + impl_->options.horizon);
}

std::string NetcdfDataset::name() const {
  const Impl& d = *impl_;
  return fmt::format("netcdf {} ({} samples, {} -> {} channels, {}×{} grid, {})", d.file, size(),
                     d.input_channels.size(), d.target_channels.size(), d.n_lat, d.n_lon,
                     d.data.defined() ? "in memory" : "read per sample");
}

const NetcdfOptions& NetcdfDataset::options() const {
  return impl_->options;
}
const std::vector<std::string>& NetcdfDataset::input_channels() const {
  return impl_->input_channels;
}
const std::vector<std::string>& NetcdfDataset::target_channels() const {
  return impl_->target_channels;
}

std::vector<ChannelStats> NetcdfDataset::input_stats() const {
  std::vector<ChannelStats> out;
  if (!impl_->stats.empty()) {
    for (const auto c : impl_->input_index) out.push_back(impl_->stats[static_cast<std::size_t>(c)]);
  }
  return out;
}

std::vector<ChannelStats> NetcdfDataset::target_stats() const {
  std::vector<ChannelStats> out;
  if (!impl_->stats.empty()) {
    for (const auto c : impl_->target_index) out.push_back(impl_->stats[static_cast<std::size_t>(c)]);
  }
  return out;
}

const std::vector<double>& NetcdfDataset::lat() const {
  return impl_->lat;
}
const std::vector<double>& NetcdfDataset::lon() const {
  return impl_->lon;
}
const std::vector<double>& NetcdfDataset::levels() const {
  return impl_->level_values;
}
std::int64_t NetcdfDataset::time_steps() const {
  return impl_->n_time;
}
std::int64_t NetcdfDataset::lat_size() const {
  return impl_->n_lat;
}
std::int64_t NetcdfDataset::lon_size() const {
  return impl_->n_lon;
}
bool NetcdfDataset::in_memory() const {
  return impl_->data.defined();
}
const std::filesystem::path& NetcdfDataset::stats_cache_path() const {
  return impl_->cache_path;
}

std::shared_ptr<NetcdfDataset> make_netcdf_dataset(const NetcdfOptions& options) {
  return std::make_shared<NetcdfDataset>(options);
}

}  // namespace bellows::data
