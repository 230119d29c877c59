// NetCDF variables as a dataset; see netcdf_dataset.h. The file is read through NetcdfFile (netcdf.h), which
// serialises every call into the netCDF C library. The normal case (a regional grid, a few variables) is loaded
// into memory at construction, so loader workers then gather without the library.
#include "bellows/data/netcdf_dataset.h"

#include <ATen/ATen.h>
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>
#include <system_error>

#include "bellows/util/atomic_file.h"  // defines: write_file_atomically
#include "bellows/util/cache.h"        // defines: user_cache_dir, fnv1a
#include "bellows/util/check.h"
#include "bellows/util/timer.h"  // defines: seconds_since

namespace bellows::data {
namespace {

namespace fs = std::filesystem;

constexpr int kStatsVersion = 1;
constexpr std::int64_t kBlockBytes = std::int64_t{64} << 20;  // read this much (as float64) per library call

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
  const fs::path root = user_cache_dir();
  if (root.empty()) return {};
  const std::string absolute = fs::absolute(file).lexically_normal().string();
  return root / "stats" / fmt::format("{}-{:016x}.json", file.filename().string(), fnv1a(absolute));
}

}  // namespace

struct NetcdfDataset::Impl {
  NetcdfOptions options;
  std::string file;                // the path as given, for messages
  std::unique_ptr<NetcdfFile> nc;  // open while samples are read from the file
  std::int64_t n_time = 0, n_lat = 0, n_lon = 0, n_level = 0;
  std::vector<NetcdfVariable> vars;   // inputs, then targets that are not inputs
  std::vector<std::int64_t> channel0;  // per variable: its first channel among all channels read
  std::vector<std::size_t> input_vars, target_vars;
  std::vector<std::string> channels, input_channels, target_channels;
  std::vector<std::int64_t> input_index, target_index;  // into `channels`
  bool inputs_are_all = false, targets_are_all = false;
  std::vector<ChannelStats> stats;  // per channel; empty without normalisation
  at::Tensor mean, inv_std;         // [channels, 1, 1] float32
  at::Tensor data;                  // [time, channels, lat, lon] float32, normalised; undefined when streaming
  std::vector<double> lat, lon, level_values;
  fs::path cache_path;

  // --- reading: blocks of time steps as float32 [nt, levels, lat, lon] (NetcdfFile::read_block) ---

  std::int64_t block_steps(const NetcdfVariable& v) const {
    return std::max<std::int64_t>(1, kBlockBytes / (v.levels * n_lat * n_lon * 8));
  }

  // One pass over the file: every variable into `data` (when `keep`), statistics into `moments` (when given).
  void read_all(bool keep, std::vector<Moments>* moments) {
    if (keep) data = at::empty({n_time, static_cast<std::int64_t>(channels.size()), n_lat, n_lon}, at::kFloat);
    for (std::size_t i = 0; i < vars.size(); ++i) {
      const NetcdfVariable& v = vars[i];
      for (std::int64_t t0 = 0; t0 < n_time; t0 += block_steps(v)) {
        const std::int64_t nt = std::min(block_steps(v), n_time - t0);
        const at::Tensor block = nc->read_block(v, t0, nt);
        if (keep) data.narrow(0, t0, nt).narrow(1, channel0[i], v.levels).copy_(block);
        if (moments) {
          for (std::int64_t l = 0; l < v.levels; ++l) {
            (*moments)[static_cast<std::size_t>(channel0[i] + l)].add(block.select(1, l));
          }
        }
      }
    }
  }

  // The channels of `which` at time t, read from the file: [channels, lat, lon], normalised.
  at::Tensor read_sample(const std::vector<std::size_t>& which, const std::vector<std::int64_t>& index,
                         std::int64_t t) const {
    std::vector<at::Tensor> parts;
    for (const std::size_t i : which) parts.push_back(nc->read_block(vars[i], t, 1)[0]);
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

  // Written durably and atomically (util/atomic_file.h), so a reader (another rank) never sees half of it;
  // false when it cannot be written.
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
    try {
      write_file_atomically(p, j.dump(2) + "\n");
      return true;
    } catch (const Error&) {
      return false;
    }
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

  // --- opening: the file, its variables and channels, then values and statistics ---

  void open();
  void open_file();
  std::vector<std::string> grid_variable_names() const;
  std::size_t add_variable(const std::string& name, const std::string& role);
  void name_channels();
  void select_channels(const std::vector<std::size_t>& which, std::vector<std::string>& names,
                       std::vector<std::int64_t>& index) const;
  bool is_all_channels(const std::vector<std::int64_t>& index) const;
  void load_values();
};

void NetcdfDataset::Impl::open() {
  file = options.path.string();
  BELLOWS_CHECK_CONFIG(options.horizon >= 0, fmt::format("data.netcdf.horizon is {}", options.horizon),
                       "set a horizon of 0 (same time step) or more");
  open_file();
  // --- variables ---
  const std::vector<std::string> inputs = options.variables.empty() ? grid_variable_names() : options.variables;
  const std::vector<std::string> targets = options.targets.empty() ? inputs : options.targets;
  for (const auto& name : inputs) input_vars.push_back(add_variable(name, "variables"));
  for (const auto& name : targets) target_vars.push_back(add_variable(name, "targets"));
  // --- channels ---
  name_channels();
  select_channels(input_vars, input_channels, input_index);
  select_channels(target_vars, target_channels, target_index);
  inputs_are_all = is_all_channels(input_index);
  targets_are_all = is_all_channels(target_index);

  BELLOWS_CHECK_CONFIG(
      options.horizon < n_time,
      fmt::format("{}: data.netcdf.horizon is {}, but the file has {} time steps", file, options.horizon, n_time),
      "choose a horizon smaller than the number of time steps");
  load_values();
}

// The file and its dimensions (kData errors for a missing, damaged or truncated file).
void NetcdfDataset::Impl::open_file() {
  nc = std::make_unique<NetcdfFile>(options.path,
                                    NetcdfGrid{options.time_dim, options.lat_dim, options.lon_dim, options.level_dim});
  n_time = nc->time_steps();
  n_lat = nc->lat_size();
  n_lon = nc->lon_size();
  n_level = nc->level_size();
}

// Without data.netcdf.variables: every variable on the grid; none is a data error listing the file's variables.
std::vector<std::string> NetcdfDataset::Impl::grid_variable_names() const {
  std::vector<std::string> inputs, described;
  for (const auto& name : nc->variable_names()) {
    const auto dims = nc->dims_of(name);
    if (nc->is_grid(dims)) inputs.push_back(name);
    described.push_back(fmt::format("{}({})", name, fmt::join(dims, ", ")));
  }
  if (inputs.empty()) {
    BELLOWS_FAIL(ErrorKind::kData,
                 fmt::format("{}: no variable has dims {}; the file's variables: {}", file, nc->grid_text(),
                             fmt::join(described, ", ")),
                 "set data.netcdf.time_dim/lat_dim/lon_dim/level_dim to the file's dimension names");
  }
  return inputs;
}

// The index of variable `name` in `vars`, added on first use. All variables share the file's time/lat/lon
// dimensions (checked by name in NetcdfFile::variable), so their grids agree by construction.
std::size_t NetcdfDataset::Impl::add_variable(const std::string& name, const std::string& role) {
  for (std::size_t i = 0; i < vars.size(); ++i) {
    if (vars[i].name == name) return i;
  }
  vars.push_back(nc->variable(name, role));
  return vars.size() - 1;
}

// The coordinates, and a channel per variable and level: "t" for a variable without levels, else "t@850".
void NetcdfDataset::Impl::name_channels() {
  lat = nc->coordinate(options.lat_dim, n_lat);
  lon = nc->coordinate(options.lon_dim, n_lon);
  level_values = nc->coordinate(options.level_dim, n_level);
  for (const auto& v : vars) {
    channel0.push_back(static_cast<std::int64_t>(channels.size()));
    for (std::int64_t l = 0; l < v.levels; ++l) {
      channels.push_back(v.p_level < 0 ? v.name
                                       : fmt::format("{}@{}", v.name,
                                                     level_values.empty()
                                                         ? fmt::format("{}", l)
                                                         : level_text(level_values[static_cast<std::size_t>(l)])));
    }
  }
}

// The channels of the variables `which`: their names and their indices into `channels`.
void NetcdfDataset::Impl::select_channels(const std::vector<std::size_t>& which, std::vector<std::string>& names,
                                          std::vector<std::int64_t>& index) const {
  for (const std::size_t i : which) {
    for (std::int64_t l = 0; l < vars[i].levels; ++l) {
      index.push_back(channel0[i] + l);
      names.push_back(channels[static_cast<std::size_t>(channel0[i] + l)]);
    }
  }
}

// Whether `index` selects every channel in order (then a sample needs no gather).
bool NetcdfDataset::Impl::is_all_channels(const std::vector<std::int64_t>& index) const {
  if (index.size() != channels.size()) return false;
  for (std::size_t c = 0; c < index.size(); ++c) {
    if (index[c] != static_cast<std::int64_t>(c)) return false;
  }
  return true;
}

// Values and statistics: one pass over the file. The values are kept in memory (normalised) when they fit in
// options.memory_limit_bytes; then the file is closed.
void NetcdfDataset::Impl::load_values() {
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
    nc.reset();  // every sample is in memory: the file is no longer needed
  }
}

NetcdfDataset::NetcdfDataset(NetcdfOptions options) : impl_(std::make_unique<Impl>()) {
  impl_->options = std::move(options);
  impl_->open();
}

NetcdfDataset::~NetcdfDataset() = default;  // closes the file, if it is still open

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
