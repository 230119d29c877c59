// Fuzzes bellows' NetCDF reader over a temp .nc file (classic CDF-1/2/5 or netCDF-4): data::NetcdfFile
// (include/bellows/data/netcdf.h: open, dimensions, coordinate variables, every gridded variable's packing and
// missing values, read_block) and the dataset over it, data::make_netcdf_dataset (netcdf_dataset.h).
//
// Input: the file's bytes.
#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "bellows/data/batch.h"
#include "bellows/data/dataset.h"
#include "bellows/data/netcdf.h"
#include "bellows/data/netcdf_dataset.h"
#include "bellows/util/error.h"
#include "fuzz_common.h"

namespace {

using namespace bellows;
namespace fz = bellows::fuzz;

constexpr std::size_t kMaxVariables = 16;

void check_block(const at::Tensor& block, const data::NetcdfFile& nc, const data::NetcdfVariable& v, std::int64_t steps) {
  fz::touch(block);
  const std::vector<std::int64_t> want = {steps, v.levels, nc.lat_size(), nc.lon_size()};
  fz::expect(block.scalar_type() == at::kFloat && block.is_contiguous() && block.sizes().vec() == want,
             "read_block of '" + v.name + "' is not float32 [steps, levels, lat, lon]");
}

void fuzz_file(const fz::fs::path& path) {
  const data::NetcdfFile nc(path, {});
  const std::int64_t steps = nc.time_steps();
  const data::NetcdfGrid& grid = nc.grid();
  (void)nc.grid_text();
  const std::array<std::pair<std::string, std::int64_t>, 4> coords = {{{grid.time_dim, steps},
                                                                       {grid.lat_dim, nc.lat_size()},
                                                                       {grid.lon_dim, nc.lon_size()},
                                                                       {grid.level_dim, nc.level_size()}}};
  for (const auto& [dim, length] : coords) {
    try {
      const auto values = nc.coordinate(dim, length);
      fz::expect(values.empty() || static_cast<std::int64_t>(values.size()) == length, "coordinate '" + dim + "' has the wrong length");
    } catch (const Error& e) {
      fz::rejected(e);
    }
  }
  auto names = nc.variable_names();
  if (names.size() > kMaxVariables) names.resize(kMaxVariables);
  for (const auto& name : names) {
    try {
      (void)nc.is_grid(nc.dims_of(name));
      const data::NetcdfVariable v = nc.variable(name, "variables");  // a kData error for one off the grid
      if (steps <= 0) continue;
      const std::int64_t n = std::min<std::int64_t>(steps, 2);
      check_block(nc.read_block(v, 0, n), nc, v, n);
      check_block(nc.read_block(v, steps - 1, 1), nc, v, 1);
    } catch (const Error& e) {
      fz::rejected(e);
    }
  }
  try {
    (void)nc.variable("no such variable", "variables");
  } catch (const Error& e) {
    fz::rejected(e);
  }
}

void fuzz_dataset(const fz::fs::path& path) {
  const fz::fs::path stats = fz::scratch_dir() / "stats.json";
  std::error_code ec;
  fz::fs::remove(stats, ec);  // statistics of the previous input must not be reused
  data::NetcdfOptions o;
  o.path = path;
  o.stats_cache = stats;
  o.memory_limit_bytes = std::int64_t{64} << 20;
  const auto ds = data::make_netcdf_dataset(o);
  (void)ds->input_channels();
  (void)ds->target_channels();
  (void)ds->input_stats();
  (void)ds->target_stats();
  const std::int64_t n = ds->size();
  if (n <= 0) return;
  data::FetchContext ctx;
  for (const std::int64_t i : {std::int64_t{0}, n - 1}) {
    const data::Example ex = ds->get(i, ctx);
    for (const auto& [key, t] : ex) fz::touch(t);
    (void)ds->describe(i);
  }
  const std::vector<std::int64_t> indices = {0, n - 1};
  const data::Batch batch = ds->get_batch(indices, ctx);
  for (const auto& [key, t] : batch.tensors) fz::touch(t);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const fz::fs::path path = fz::input_file(data, size, "grid.nc");
  if (path.empty()) return 0;
  try {
    fuzz_file(path);
  } catch (const Error& e) {
    fz::rejected(e);
  }
  try {
    fuzz_dataset(path);
  } catch (const Error& e) {
    return fz::rejected(e);
  }
  return 0;
}
