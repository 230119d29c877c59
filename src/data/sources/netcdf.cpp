// data.source: netcdf -- variables on a time/lat/lon[/level] grid, normalised with cached statistics; the
// grid's coordinates and channel names are the facts a graph network builds its mesh from.
#include "bellows/config/binding.h"  // defines: Binding
#include "bellows/data/netcdf_dataset.h"
#include "bellows/data/source_registry.h"

namespace bellows::data {
namespace {

// The data.netcdf.* keys of NetcdfOptions, bound once (config/binding.h).
const config::Binding<NetcdfOptions>& netcdf_binding() {
  using O = NetcdfOptions;
  return config::bound<O>("data.netcdf.", [](config::Binding<O>& b) {
    b.key("variables", &O::variables, "input variables (empty: all on the time/lat/lon grid)");
    b.key("targets", &O::targets, "target variables (empty: the inputs)");
    b.key("horizon", &O::horizon, "targets at time t + horizon").min(0);
    b.key("time_dim", &O::time_dim, "time dimension name");
    b.key("lat_dim", &O::lat_dim, "latitude dimension name");
    b.key("lon_dim", &O::lon_dim, "longitude dimension name");
    b.key("level_dim", &O::level_dim, "vertical level dimension name");
    b.key("normalize", &O::normalize, "per-variable, per-level standardisation");
    b.key("stats_cache", &O::stats_cache, "statistics cache file (empty: beside the data)").file_path();
  });
}

NetcdfOptions netcdf_options(const SourceRequest& r) {
  NetcdfOptions o = netcdf_binding().read(*r.config);
  o.path = r.path;
  return o;
}

DataFacts grid_facts(const NetcdfDataset& nc) {
  DataFacts f;
  f.source = nc.name();
  f.grid = GridFacts{nc.lat(), nc.lon(), nc.input_channels(), nc.target_channels()};
  return f;
}

SourceEntry netcdf_source() {
  SourceEntry e;
  e.name = "netcdf";
  e.help = "NetCDF variables on a time/lat/lon[/level] grid";
  e.temporal = true;
  e.add_keys = [](config::Schema& s) { netcdf_binding().declare(s); };
  e.open = [](const SourceRequest& r) -> std::shared_ptr<const Dataset> { return make_netcdf_dataset(netcdf_options(r)); };
  e.facts = [](const Dataset& d) {
    const auto* nc = dynamic_cast<const NetcdfDataset*>(&d);
    return nc ? grid_facts(*nc) : DataFacts{};
  };
  // The header and coordinates only: no statistics, no values.
  e.facts_without_data = [](const SourceRequest& r) {
    NetcdfOptions o = netcdf_options(r);
    o.horizon = 0;  // any file with a time step has a sample; the horizon does not change the grid
    o.normalize = false;
    o.memory_limit_bytes = 0;  // read per sample: opening reads the header and coordinates only
    return grid_facts(*make_netcdf_dataset(o));
  };
  return e;
}

const SourceRegistrar kNetcdfRegistered(netcdf_source());

}  // namespace
}  // namespace bellows::data
