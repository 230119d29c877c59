// Gridded variables of a NetCDF file (time, lat, lon[, level]) as samples: "x" float32 [C, lat, lon] at time
// t and "y" float32 [C', lat, lon] at t + horizon, normalised per channel with statistics computed once and
// cached beside the file. The dataset built on the format reader of netcdf.h; the regional weather model
// (seed 000) trains from such a file.
//   auto ds = make_netcdf_dataset({.path = "regional_weather.nc", .variables = {"t2m", "u"}});
//   ds->input_channels();  // {"t2m", "u@850", "u@500"}
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "bellows/data/dataset.h"  // defines: Dataset
#include "bellows/data/netcdf.h"   // the format reader: NetcdfFile, NetcdfGrid

namespace bellows::data {

struct NetcdfOptions {
  std::filesystem::path path;
  std::vector<std::string> variables;  // inputs; empty: every variable with dims (time, lat, lon[, level])
  std::vector<std::string> targets;    // empty: the same as variables (forecasting the state at t + horizon)
  std::int64_t horizon = 1;            // y is taken at time t + horizon (0: the same time step)
  std::string time_dim = "time", lat_dim = "lat", lon_dim = "lon", level_dim = "level";
  bool normalize = true;  // (v - mean) / std per variable and level; statistics computed once, cached
  // Empty: "<path>.stats.json" beside the file when its directory is writable, else
  // $BELLOWS_CACHE/stats/<file name>-<hash of its absolute path>.json ($BELLOWS_CACHE: ~/.cache/bellows).
  std::filesystem::path stats_cache;
  // The variables are loaded into memory (as float32) when they fit in this many bytes; otherwise every sample
  // is read from the file, under a process-wide lock (the netCDF C library is not thread-safe).
  std::int64_t memory_limit_bytes = std::int64_t{2} << 30;
};

// Statistics of one channel over the whole file: mean and population standard deviation (ddof 0), in float64.
// A constant channel (std 0) is only shifted: it is divided by 1.
struct ChannelStats {
  std::string name;
  double mean = 0;
  double std = 1;
};

// Values are unpacked (scale_factor, add_offset) as the file says. A missing value -- NaN, the variable's
// _FillValue or missing_value, or netCDF's default fill for float/double variables without _FillValue -- is
// a kData error naming the variable and its time (and level, lat, lon) index: bellows does not fill gaps.
class NetcdfDataset final : public Dataset {
 public:
  explicit NetcdfDataset(NetcdfOptions options);
  ~NetcdfDataset() override;

  std::int64_t size() const override;  // time steps - horizon
  Example get(std::int64_t index, FetchContext& context) const override;
  Batch get_batch(std::span<const std::int64_t> indices, FetchContext& context) const override;
  std::string describe(std::int64_t index) const override;  // "<file> time index 5 (target 6)"
  std::string name() const override;

  const NetcdfOptions& options() const;
  // Channel names: "t2m" for a variable without levels, "u@850" (the level coordinate's value, or the level
  // index when the file has no level coordinate variable) for each level of one with levels.
  const std::vector<std::string>& input_channels() const;
  const std::vector<std::string>& target_channels() const;
  // Statistics of the input and target channels (empty when normalize is false).
  std::vector<ChannelStats> input_stats() const;
  std::vector<ChannelStats> target_stats() const;
  // Coordinate values (empty when the file has no coordinate variable of that name).
  const std::vector<double>& lat() const;
  const std::vector<double>& lon() const;
  const std::vector<double>& levels() const;
  std::int64_t time_steps() const;
  std::int64_t lat_size() const;
  std::int64_t lon_size() const;
  bool in_memory() const;                                 // false: samples are read from the file
  const std::filesystem::path& stats_cache_path() const;  // where the statistics were read or written

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// kData errors name the file and the variable, dimension or time index; kConfig for a horizon that leaves no
// sample.
std::shared_ptr<NetcdfDataset> make_netcdf_dataset(const NetcdfOptions& options);

}  // namespace bellows::data
