// The NetCDF format reader: a file's gridded variables -- dims (time, lat, lon) or (time, level, lat, lon), in
// any order -- read through the netCDF C library as float32 blocks, unpacked and checked for missing values,
// with the file's coordinate variables. The dataset built on it (samples, normalisation) is netcdf_dataset.h.
//   NetcdfFile nc("regional_weather.nc", {});
//   const at::Tensor block = nc.read_block(nc.variable("t2m", "variables"), 0, 8);  // [8, 1, lat, lon]
#pragma once

#include <ATen/core/Tensor.h>

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

namespace bellows::data {

// The dimension names of the grid.
struct NetcdfGrid {
  std::string time_dim = "time", lat_dim = "lat", lon_dim = "lon", level_dim = "level";
};

// One gridded variable as the file describes it (NetcdfFile::variable).
struct NetcdfVariable {
  std::string name;
  int varid = -1;                  // the library's id
  std::vector<std::string> dims;   // in file order
  std::vector<std::size_t> lens;   // their lengths
  int p_time = -1, p_level = -1, p_lat = -1, p_lon = -1;  // positions of the dimensions in `dims`
  std::int64_t levels = 1;         // the level dimension's length; 1 without one
  double scale = 1, offset = 0;    // packing (CF): value = raw * scale_factor + add_offset
  bool exact_in_float = false;     // raw values read as float32 without loss (float, integers up to 16 bits)
  std::vector<double> missing;     // raw values that mean "no data"
};

// An open file. The netCDF C library is not thread-safe: every call into it, from any NetcdfFile of the
// process, holds one process-wide mutex, so that a NetcdfFile may be read from several threads. All errors are
// kData errors naming the file; hints name the data.netcdf.* keys that choose dimensions and variables.
class NetcdfFile {
 public:
  // Opens `path` read-only and reads its dimensions: time, lat and lon are required, the level dimension is
  // optional. A classic-format (CDF-1/2/5) file shorter than its header says is refused as truncated (the
  // library would read the missing data as zeros); netCDF-4 (HDF5) files are checked by their library.
  NetcdfFile(std::filesystem::path path, NetcdfGrid grid);
  ~NetcdfFile();
  NetcdfFile(const NetcdfFile&) = delete;
  NetcdfFile& operator=(const NetcdfFile&) = delete;

  const std::string& file() const;  // the path as given, for messages
  const NetcdfGrid& grid() const;
  std::int64_t time_steps() const;
  std::int64_t lat_size() const;
  std::int64_t lon_size() const;
  std::int64_t level_size() const;  // 0 when the file has no level dimension

  std::vector<std::string> variable_names() const;                  // every variable, in file order
  std::vector<std::string> dims_of(const std::string& name) const;  // a variable's dimension names
  bool is_grid(const std::vector<std::string>& dims) const;         // (time, lat, lon[, level]) in any order
  std::string grid_text() const;  // "(time, lat, lon) or (time, level, lat, lon)" with the grid's names

  // A gridded numeric variable with its packing and missing values (_FillValue, missing_value, and for
  // float/double variables without _FillValue the library's default fill). `option` is the data.netcdf key
  // that named it ("variables", "targets"), for the hint when it is absent or not on the grid.
  NetcdfVariable variable(const std::string& name, const std::string& option) const;
  // The 1-D coordinate variable named like dimension `dim` with `length` values; empty when there is none.
  std::vector<double> coordinate(const std::string& dim, std::int64_t length) const;
  // Time steps [t0, t0 + steps) of `v` as float32 [steps, levels, lat, lon], contiguous, unpacked (in float64
  // when packed). A missing value (NaN or one of v.missing) is a kData error naming the variable and its time,
  // level, lat and lon index.
  at::Tensor read_block(const NetcdfVariable& v, std::int64_t t0, std::int64_t steps) const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace bellows::data
