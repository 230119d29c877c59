// Data of examples/weather-gnn (seed 000): regional_weather.nc, a NetCDF-4 file (time, lat, lon) with 8
// variables on a 64x64 regional grid over 40-56 N, 0-16 E (--quick: 16x16 over the same region, fewer hours),
// hourly. The weather is a small deterministic model, smooth and learnable from one state to the next:
//   winds u10/v10: a steady westerly jet plus eddies (a streamfunction) drifting east at a constant speed;
//   msl and z500: diagnosed from the eddies, the jet's pressure gradient and temperature;
//   t2m and tcwv: carried by the wind (semi-Lagrangian, bilinear, inflow from the boundary values), diffused,
//   t2m relaxed towards a latitude/land pattern, tcwv fed by evaporation over "sea" and drained by rain;
//   tp (rain) and tcc (cloud) are smooth functions of tcwv.
#include <fmt/format.h>
#include <netcdf.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <numbers>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "bellows/util/check.h"
#include "generators.h"

namespace bellows::example_data {
namespace {

constexpr double kPi = std::numbers::pi;
constexpr double kLatNorth = 56, kLatSouth = 40, kLonWest = 0, kLonEast = 16;  // the region

void nc_ok(int status, const std::string& what, const std::filesystem::path& path) {
  BELLOWS_CHECK_RESOURCE(status == NC_NOERR, fmt::format("writing {}: {}: {}", path.string(), what, nc_strerror(status)),
                         "check that the directory is writable and the disk is not full");
}

// Uniform in [0, 1) from 53 random bits: the same numbers with every standard library.
double uniform(std::mt19937_64& gen) { return static_cast<double>(gen() >> 11) * 0x1.0p-53; }

struct Wave {
  double m, n, amplitude, phase;  // cycles across the region in X and Y
};

std::vector<Wave> waves(std::mt19937_64& gen, int count, double amplitude) {
  std::vector<Wave> out;
  for (int k = 0; k < count; ++k) {
    const double m = 1 + std::floor(3 * uniform(gen)), n = 1 + std::floor(3 * uniform(gen));
    out.push_back({m, n * (uniform(gen) < 0.5 ? -1 : 1), amplitude * (0.6 + 0.4 * uniform(gen)), 2 * kPi * uniform(gen)});
  }
  return out;
}

double softplus(double x) { return x > 30 ? x : std::log1p(std::exp(x)); }

// A field on the grid, row-major [lat][lon]; row 0 is the northernmost (lat decreasing, as in ERA5 files).
class Grid {
 public:
  explicit Grid(int n) : n_(n), v_(static_cast<std::size_t>(n * n), 0.0) {}
  double& at(int i, int j) { return v_[static_cast<std::size_t>(i * n_ + j)]; }
  double at(int i, int j) const { return v_[static_cast<std::size_t>(i * n_ + j)]; }
  // Bilinear value at fractional (row, col), clamped to the region: inflow brings the boundary's values.
  double sample(double r, double c) const {
    r = std::clamp(r, 0.0, n_ - 1.0);
    c = std::clamp(c, 0.0, n_ - 1.0);
    const int i = std::min(static_cast<int>(r), n_ - 2), j = std::min(static_cast<int>(c), n_ - 2);
    const double a = r - i, b = c - j;
    return (1 - a) * ((1 - b) * at(i, j) + b * at(i, j + 1)) + a * ((1 - b) * at(i + 1, j) + b * at(i + 1, j + 1));
  }
  // 5-point Laplacian with zero-gradient boundaries.
  double laplacian(int i, int j) const {
    const auto v = [&](int a, int b) { return at(std::clamp(a, 0, n_ - 1), std::clamp(b, 0, n_ - 1)); };
    return v(i - 1, j) + v(i + 1, j) + v(i, j - 1) + v(i, j + 1) - 4 * at(i, j);
  }
  const std::vector<double>& values() const { return v_; }

 private:
  int n_;
  std::vector<double> v_;
};

// The land fraction at (X, Y): a smooth continent, where t2m is warmer and tcwv gets no evaporation.
double land(double x, double y) {
  return 0.5 + 0.5 * std::tanh(6 * (std::sin(kPi * x) * std::cos(1.5 * kPi * (y - 0.3)) - 0.2));
}

double wave_sum(const std::vector<Wave>& ws, double x, double y) {
  double s = 0;
  for (const auto& w : ws) s += w.amplitude * std::sin(2 * kPi * (w.m * x + w.n * y) + w.phase);
  return s;
}

// The temperature t2m is relaxed towards: colder to the north, warmer over land.
double t_eq(double x, double y) { return 291 - 12 * y + 4 * land(x, y); }

// The eddies' streamfunction at (x, y) and its gradient.
struct Streamfunction {
  double p = 0, dpdx = 0, dpdy = 0;
};

Streamfunction streamfunction(const std::vector<Wave>& eddies, double x, double y) {
  Streamfunction f;
  for (const auto& w : eddies) {
    const double arg = 2 * kPi * (w.m * x + w.n * y) + w.phase;
    f.p += w.amplitude * std::sin(arg);
    f.dpdx += w.amplitude * 2 * kPi * w.m * std::cos(arg);
    f.dpdy += w.amplitude * 2 * kPi * w.n * std::cos(arg);
  }
  return f;
}

// The fields on the grid: t (t2m) and q (tcwv) are the prognostic state, the others are diagnosed from it and the
// eddies. Winds in region widths per step.
struct WeatherFields {
  explicit WeatherFields(int n) : u(n), v(n), psi(n), t(n), q(n), tp(n), tcc(n), msl(n), z500(n) {}
  Grid u, v, psi, t, q, tp, tcc, msl, z500;
};

// The weather of the region on an n x n grid, step by step (an hour each).
class RegionalWeather {
 public:
  RegionalWeather(int n, std::uint64_t seed) : n_(n), f_(n) {
    std::mt19937_64 gen(seed * 0x9E3779B97F4A7C15ull + 0x5EED000);
    eddies_ = waves(gen, 4, 0.0015);  // streamfunction, in region widths^2 per step
    const std::vector<Wave> t_anomaly = waves(gen, 3, 3.0), q_anomaly = waves(gen, 3, 5.0);
    for (int i = 0; i < n_; ++i) {
      for (int j = 0; j < n_; ++j) {
        f_.t.at(i, j) = t_eq(x_of(j), y_of(i)) + wave_sum(t_anomaly, x_of(j), y_of(i));
        f_.q.at(i, j) = std::max(1.0, 24 + 6 * (1 - land(x_of(j), y_of(i))) + wave_sum(q_anomaly, x_of(j), y_of(i)));
      }
    }
  }

  const WeatherFields& fields() const { return f_; }

  // Diagnostics of step s from the prognostic state.
  void diagnose(int s) {
    for (int i = 0; i < n_; ++i) {
      for (int j = 0; j < n_; ++j) {
        const double x = x_of(j) - kDriftX * s, y = y_of(i) - kDriftY * s;
        const Streamfunction e = streamfunction(eddies_, x, y);
        const double yy = y_of(i);
        f_.psi.at(i, j) = e.p;
        f_.u.at(i, j) = kJet * std::exp(-std::pow((yy - 0.55) / 0.25, 2)) - e.dpdy;  // region widths per step
        f_.v.at(i, j) = e.dpdx;
        f_.tcc.at(i, j) = 1 / (1 + std::exp(-(f_.q.at(i, j) - 26) / 3));
        f_.tp.at(i, j) = 0.4 * softplus((f_.q.at(i, j) - 30) / 2);  // mm per hour
        f_.msl.at(i, j) = 101325 + 8e5 * e.p - 1500 * (yy - 0.5);
        f_.z500.at(i, j) = 9.80665 * (5500 + 0.08 * (f_.msl.at(i, j) - 101325) + 12 * (f_.t.at(i, j) - 285));
      }
    }
  }

  // One hour: carry t and q along the wind, diffuse, force.
  void advance() {
    const double cells = n_ - 1, kappa_cells = kKappa * cells * cells;
    Grid t_next(n_), q_next(n_);
    for (int i = 0; i < n_; ++i) {
      for (int j = 0; j < n_; ++j) {
        // Departure point: rows grow southward, so a northward wind brings air from a larger row index.
        const double r = i + f_.v.at(i, j) * cells, c = j - f_.u.at(i, j) * cells;
        const double sea = 1 - land(x_of(j), y_of(i));
        t_next.at(i, j) = f_.t.sample(r, c) + kappa_cells * f_.t.laplacian(i, j) +
                          (t_eq(x_of(j), y_of(i)) - f_.t.at(i, j)) / 48 - 0.3 * (f_.tcc.at(i, j) - 0.5);
        q_next.at(i, j) = std::max(0.5, f_.q.sample(r, c) + kappa_cells * f_.q.laplacian(i, j) + 0.35 * sea -
                                            f_.tp.at(i, j));
      }
    }
    f_.t = std::move(t_next);
    f_.q = std::move(q_next);
  }

 private:
  static constexpr double kDriftX = 0.008, kDriftY = 0.0015;  // eddy drift, region widths per step
  // Jet speed (region widths per step); diffusion (widths^2 per step).
  static constexpr double kJet = 0.02, kKappa = 2e-5;

  // X: 0 (west) -> 1 (east); Y: 0 (south) -> 1 (north), for row i and column j.
  double x_of(int j) const { return static_cast<double>(j) / (n_ - 1); }
  double y_of(int i) const { return 1.0 - static_cast<double>(i) / (n_ - 1); }

  int n_;
  WeatherFields f_;
  std::vector<Wave> eddies_;
};

// regional_weather.nc: the dimensions, the coordinates and the 8 variables defined when it is opened, then the
// fields written hour by hour. Every NetCDF error is a resource error naming the file and the call.
class WeatherFile {
 public:
  // `to_ms`: region widths per step -> m/s, for the winds.
  WeatherFile(std::filesystem::path path, int n, const WeatherFields& f, double to_ms)
      : path_(std::move(path)),
        n_(n),
        outputs_{{"u10", "m s-1", "10 m eastward wind", &f.u, to_ms},
                 {"v10", "m s-1", "10 m northward wind", &f.v, to_ms},
                 {"msl", "Pa", "mean sea level pressure", &f.msl, 1},
                 {"t2m", "K", "2 m temperature", &f.t, 1},
                 {"tcwv", "kg m-2", "total column water vapour", &f.q, 1},
                 {"tcc", "1", "total cloud cover", &f.tcc, 1},
                 {"tp", "mm h-1", "total precipitation rate", &f.tp, 1},
                 {"z500", "m2 s-2", "500 hPa geopotential", &f.z500, 1}},
        buffer_(static_cast<std::size_t>(n * n)) {
    nc_ok(nc_create(path_.c_str(), NC_CLOBBER | NC_NETCDF4, &nc_), "create", path_);
    define_coordinates();
    define_variables();
    nc_ok(nc_enddef(nc_), "enddef", path_);
    write_coordinates();
  }

  const std::filesystem::path& path() const { return path_; }

  // Hour k: its time and the fields as they are now.
  void write_hour(std::size_t k) {
    const double hour = static_cast<double>(k);
    const std::size_t start1 = k, count1 = 1;
    nc_ok(nc_put_vara_double(nc_, v_time_, &start1, &count1, &hour), "time", path_);
    const std::size_t start[] = {k, 0, 0}, count[] = {1, static_cast<std::size_t>(n_), static_cast<std::size_t>(n_)};
    for (const auto& o : outputs_) {
      const auto& values = o.grid->values();
      for (std::size_t e = 0; e < values.size(); ++e) buffer_[e] = static_cast<float>(values[e] * o.scale);
      nc_ok(nc_put_vara_float(nc_, o.var, start, count, buffer_.data()), o.name, path_);
    }
  }

  void close() { nc_ok(nc_close(nc_), "close", path_); }

 private:
  struct Output {
    const char* name;
    const char* units;
    const char* long_name;
    const Grid* grid;
    double scale;
    int var = -1;
  };

  void put_text(int var, const char* name, const std::string& text) {
    nc_ok(nc_put_att_text(nc_, var, name, text.size(), text.c_str()), name, path_);
  }

  // time (unlimited), lat and lon, each a dimension and a variable of its own, with units; the file's title.
  void define_coordinates() {
    nc_ok(nc_def_dim(nc_, "time", NC_UNLIMITED, &d_time_), "time", path_);
    nc_ok(nc_def_dim(nc_, "lat", static_cast<std::size_t>(n_), &d_lat_), "lat", path_);
    nc_ok(nc_def_dim(nc_, "lon", static_cast<std::size_t>(n_), &d_lon_), "lon", path_);
    nc_ok(nc_def_var(nc_, "time", NC_DOUBLE, 1, &d_time_, &v_time_), "time", path_);
    nc_ok(nc_def_var(nc_, "lat", NC_DOUBLE, 1, &d_lat_, &v_lat_), "lat", path_);
    nc_ok(nc_def_var(nc_, "lon", NC_DOUBLE, 1, &d_lon_, &v_lon_), "lon", path_);
    put_text(v_time_, "units", "hours since 2000-01-01 00:00:00");
    put_text(v_lat_, "units", "degrees_north");
    put_text(v_lon_, "units", "degrees_east");
    put_text(NC_GLOBAL, "title", "bellows example weather-gnn: synthetic regional weather (seed 000)");
  }

  // The 8 variables on (time, lat, lon), float, with units and long names.
  void define_variables() {
    const int dims[] = {d_time_, d_lat_, d_lon_};
    for (auto& o : outputs_) {
      nc_ok(nc_def_var(nc_, o.name, NC_FLOAT, 3, dims, &o.var), o.name, path_);
      put_text(o.var, "units", o.units);
      put_text(o.var, "long_name", o.long_name);
    }
  }

  // Latitudes from north to south (row 0 the northernmost), longitudes from west to east.
  void write_coordinates() {
    std::vector<double> lat(static_cast<std::size_t>(n_)), lon(static_cast<std::size_t>(n_));
    for (int k = 0; k < n_; ++k) {
      lat[static_cast<std::size_t>(k)] = kLatNorth + (kLatSouth - kLatNorth) * k / (n_ - 1);
      lon[static_cast<std::size_t>(k)] = kLonWest + (kLonEast - kLonWest) * k / (n_ - 1);
    }
    nc_ok(nc_put_var_double(nc_, v_lat_, lat.data()), "lat", path_);
    nc_ok(nc_put_var_double(nc_, v_lon_, lon.data()), "lon", path_);
  }

  std::filesystem::path path_;
  int n_;
  int nc_ = -1, d_time_ = -1, d_lat_ = -1, d_lon_ = -1, v_time_ = -1, v_lat_ = -1, v_lon_ = -1;
  std::vector<Output> outputs_;
  std::vector<float> buffer_;
};

}  // namespace

std::string generate_weather_gnn(const GenOptions& options) {
  const int n = options.quick ? 16 : 64;          // grid points along lat and lon
  const int hours = options.quick ? 64 : 240;     // time steps written (hourly)
  const int spin_up = 24;                         // steps run before the first one written
  constexpr double kRegionMetres = 1.3e6, kStepSeconds = 3600;  // ~16 degrees; one hour
  const double to_ms = kRegionMetres / kStepSeconds;           // region widths per step -> m/s

  RegionalWeather weather(n, options.seed);
  std::filesystem::create_directories(options.out);
  WeatherFile file(options.out / "regional_weather.nc", n, weather.fields(), to_ms);
  for (int s = 0; s < spin_up + hours; ++s) {
    weather.diagnose(s);
    if (s >= spin_up) file.write_hour(static_cast<std::size_t>(s - spin_up));
    weather.advance();
  }
  file.close();
  return fmt::format("wrote {}: {} hourly steps x 8 variables (u10 v10 msl t2m tcwv tcc tp z500) on a {}x{} grid, "
                     "lat {}..{} N, lon {}..{} E",
                     file.path().string(), hours, n, n, kLatNorth, kLatSouth, kLonWest, kLonEast);
}

}  // namespace bellows::example_data
