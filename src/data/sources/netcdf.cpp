// data.source: netcdf -- variables on a time/lat/lon[/level] grid, normalised with cached statistics; the
// grid's coordinates and channel names are the facts a graph network builds its mesh from.
#include "bellows/data/netcdf_dataset.h"
#include "bellows/data/source_registry.h"

namespace bellows::data {
namespace {

NetcdfOptions netcdf_options(const SourceRequest& r) {
  using namespace config;
  const Config& c = *r.config;
  NetcdfOptions o;
  o.path = r.path;
  o.variables = get_string_list(c, "data.netcdf.variables");
  o.targets = get_string_list(c, "data.netcdf.targets");
  o.horizon = get_int(c, "data.netcdf.horizon");
  o.time_dim = get_string(c, "data.netcdf.time_dim");
  o.lat_dim = get_string(c, "data.netcdf.lat_dim");
  o.lon_dim = get_string(c, "data.netcdf.lon_dim");
  o.level_dim = get_string(c, "data.netcdf.level_dim");
  o.normalize = get_bool(c, "data.netcdf.normalize");
  o.stats_cache = get_string(c, "data.netcdf.stats_cache");
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
  e.add_keys = [](config::Schema& s) {
    using config::Type;
    auto node = [](auto v) { return YAML::Node(v); };
    const YAML::Node empty = YAML::Load("[]");
    s.add("data.netcdf.variables", Type::kStringList, "input variables (empty: all on the time/lat/lon grid)").default_value(empty);
    s.add("data.netcdf.targets", Type::kStringList, "target variables (empty: the inputs)").default_value(empty);
    s.add("data.netcdf.horizon", Type::kInt, "targets at time t + horizon").min(0).default_value(node(1));
    s.add("data.netcdf.time_dim", Type::kString, "time dimension name").default_value(node("time"));
    s.add("data.netcdf.lat_dim", Type::kString, "latitude dimension name").default_value(node("lat"));
    s.add("data.netcdf.lon_dim", Type::kString, "longitude dimension name").default_value(node("lon"));
    s.add("data.netcdf.level_dim", Type::kString, "vertical level dimension name").default_value(node("level"));
    s.add("data.netcdf.normalize", Type::kBool, "per-variable, per-level standardisation").default_value(node(true));
    s.add("data.netcdf.stats_cache", Type::kString, "statistics cache file (empty: beside the data)").default_value(node(""));
  };
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
