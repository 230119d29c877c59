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
#include <filesystem>
#include <numbers>
#include <random>
#include <string>
#include <vector>

#include "bellows/util/check.h"
#include "generators.h"

namespace bellows::example_data {
namespace {

constexpr double kPi = std::numbers::pi;

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

}  // namespace

std::string generate_weather_gnn(const GenOptions& options) {
  const int n = options.quick ? 16 : 64;          // grid points along lat and lon
  const int hours = options.quick ? 64 : 240;     // time steps written (hourly)
  const int spin_up = 24;                         // steps run before the first one written
  const double lat_north = 56, lat_south = 40, lon_west = 0, lon_east = 16;
  constexpr double kRegionMetres = 1.3e6, kStepSeconds = 3600;  // ~16 degrees; one hour
  const double to_ms = kRegionMetres / kStepSeconds;           // region widths per step -> m/s

  std::mt19937_64 gen(options.seed * 0x9E3779B97F4A7C15ull + 0x5EED000);
  const std::vector<Wave> eddies = waves(gen, 4, 0.0015);  // streamfunction, in region widths^2 per step
  const std::vector<Wave> t_anomaly = waves(gen, 3, 3.0), q_anomaly = waves(gen, 3, 5.0);
  const double drift_x = 0.008, drift_y = 0.0015;  // eddy drift, region widths per step
  const double jet = 0.02, kappa = 2e-5;           // jet speed (region widths per step); diffusion (widths^2 per step)

  // X: 0 (west) -> 1 (east); Y: 0 (south) -> 1 (north), for row i and column j.
  const auto X = [&](int j) { return static_cast<double>(j) / (n - 1); };
  const auto Y = [&](int i) { return 1.0 - static_cast<double>(i) / (n - 1); };
  const auto land = [&](double x, double y) { return 0.5 + 0.5 * std::tanh(6 * (std::sin(kPi * x) * std::cos(1.5 * kPi * (y - 0.3)) - 0.2)); };
  const auto wave_sum = [](const std::vector<Wave>& ws, double x, double y) {
    double s = 0;
    for (const auto& w : ws) s += w.amplitude * std::sin(2 * kPi * (w.m * x + w.n * y) + w.phase);
    return s;
  };
  const auto t_eq = [&](double x, double y) { return 291 - 12 * y + 4 * land(x, y); };

  Grid u(n), v(n), psi(n), t(n), q(n), tp(n), tcc(n), msl(n), z500(n);
  for (int i = 0; i < n; ++i) {
    for (int j = 0; j < n; ++j) {
      t.at(i, j) = t_eq(X(j), Y(i)) + wave_sum(t_anomaly, X(j), Y(i));
      q.at(i, j) = std::max(1.0, 24 + 6 * (1 - land(X(j), Y(i))) + wave_sum(q_anomaly, X(j), Y(i)));
    }
  }
  // --- diagnostics of step s from the prognostic state ---
  const auto diagnose = [&](int s) {
    for (int i = 0; i < n; ++i) {
      for (int j = 0; j < n; ++j) {
        const double x = X(j) - drift_x * s, y = Y(i) - drift_y * s;
        double p = 0, dpdx = 0, dpdy = 0;
        for (const auto& w : eddies) {
          const double arg = 2 * kPi * (w.m * x + w.n * y) + w.phase;
          p += w.amplitude * std::sin(arg);
          dpdx += w.amplitude * 2 * kPi * w.m * std::cos(arg);
          dpdy += w.amplitude * 2 * kPi * w.n * std::cos(arg);
        }
        const double yy = Y(i);
        psi.at(i, j) = p;
        u.at(i, j) = jet * std::exp(-std::pow((yy - 0.55) / 0.25, 2)) - dpdy;  // region widths per step
        v.at(i, j) = dpdx;
        tcc.at(i, j) = 1 / (1 + std::exp(-(q.at(i, j) - 26) / 3));
        tp.at(i, j) = 0.4 * softplus((q.at(i, j) - 30) / 2);  // mm per hour
        msl.at(i, j) = 101325 + 8e5 * p - 1500 * (yy - 0.5);
        z500.at(i, j) = 9.80665 * (5500 + 0.08 * (msl.at(i, j) - 101325) + 12 * (t.at(i, j) - 285));
      }
    }
  };
  // --- one hour: carry t and q along the wind, diffuse, force ---
  const double cells = n - 1, kappa_cells = kappa * cells * cells;
  const auto advance = [&] {
    Grid t_next(n), q_next(n);
    for (int i = 0; i < n; ++i) {
      for (int j = 0; j < n; ++j) {
        // Departure point: rows grow southward, so a northward wind brings air from a larger row index.
        const double r = i + v.at(i, j) * cells, c = j - u.at(i, j) * cells;
        const double sea = 1 - land(X(j), Y(i));
        t_next.at(i, j) = t.sample(r, c) + kappa_cells * t.laplacian(i, j) + (t_eq(X(j), Y(i)) - t.at(i, j)) / 48 -
                          0.3 * (tcc.at(i, j) - 0.5);
        q_next.at(i, j) = std::max(0.5, q.sample(r, c) + kappa_cells * q.laplacian(i, j) + 0.35 * sea - tp.at(i, j));
      }
    }
    t = std::move(t_next);
    q = std::move(q_next);
  };

  // --- the file ---
  std::filesystem::create_directories(options.out);
  const std::filesystem::path path = options.out / "regional_weather.nc";
  int nc = -1, d_time, d_lat, d_lon, v_time, v_lat, v_lon;
  nc_ok(nc_create(path.c_str(), NC_CLOBBER | NC_NETCDF4, &nc), "create", path);
  const auto put_text = [&](int var, const char* name, const std::string& text) {
    nc_ok(nc_put_att_text(nc, var, name, text.size(), text.c_str()), name, path);
  };
  nc_ok(nc_def_dim(nc, "time", NC_UNLIMITED, &d_time), "time", path);
  nc_ok(nc_def_dim(nc, "lat", static_cast<std::size_t>(n), &d_lat), "lat", path);
  nc_ok(nc_def_dim(nc, "lon", static_cast<std::size_t>(n), &d_lon), "lon", path);
  nc_ok(nc_def_var(nc, "time", NC_DOUBLE, 1, &d_time, &v_time), "time", path);
  nc_ok(nc_def_var(nc, "lat", NC_DOUBLE, 1, &d_lat, &v_lat), "lat", path);
  nc_ok(nc_def_var(nc, "lon", NC_DOUBLE, 1, &d_lon, &v_lon), "lon", path);
  put_text(v_time, "units", "hours since 2000-01-01 00:00:00");
  put_text(v_lat, "units", "degrees_north");
  put_text(v_lon, "units", "degrees_east");
  put_text(NC_GLOBAL, "title", "bellows example weather-gnn: synthetic regional weather (seed 000)");
  struct Output {
    const char* name;
    const char* units;
    const char* long_name;
    const Grid* grid;
    double scale;
    int var = -1;
  };
  std::vector<Output> outputs = {{"u10", "m s-1", "10 m eastward wind", &u, to_ms},
                                 {"v10", "m s-1", "10 m northward wind", &v, to_ms},
                                 {"msl", "Pa", "mean sea level pressure", &msl, 1},
                                 {"t2m", "K", "2 m temperature", &t, 1},
                                 {"tcwv", "kg m-2", "total column water vapour", &q, 1},
                                 {"tcc", "1", "total cloud cover", &tcc, 1},
                                 {"tp", "mm h-1", "total precipitation rate", &tp, 1},
                                 {"z500", "m2 s-2", "500 hPa geopotential", &z500, 1}};
  const int dims[] = {d_time, d_lat, d_lon};
  for (auto& o : outputs) {
    nc_ok(nc_def_var(nc, o.name, NC_FLOAT, 3, dims, &o.var), o.name, path);
    put_text(o.var, "units", o.units);
    put_text(o.var, "long_name", o.long_name);
  }
  nc_ok(nc_enddef(nc), "enddef", path);
  std::vector<double> lat(static_cast<std::size_t>(n)), lon(static_cast<std::size_t>(n));
  for (int k = 0; k < n; ++k) {
    lat[static_cast<std::size_t>(k)] = lat_north + (lat_south - lat_north) * k / (n - 1);
    lon[static_cast<std::size_t>(k)] = lon_west + (lon_east - lon_west) * k / (n - 1);
  }
  nc_ok(nc_put_var_double(nc, v_lat, lat.data()), "lat", path);
  nc_ok(nc_put_var_double(nc, v_lon, lon.data()), "lon", path);

  std::vector<float> buffer(static_cast<std::size_t>(n * n));
  for (int s = 0; s < spin_up + hours; ++s) {
    diagnose(s);
    if (s >= spin_up) {
      const std::size_t k = static_cast<std::size_t>(s - spin_up);
      const double hour = static_cast<double>(k);
      const std::size_t start1 = k, count1 = 1;
      nc_ok(nc_put_vara_double(nc, v_time, &start1, &count1, &hour), "time", path);
      const std::size_t start[] = {k, 0, 0}, count[] = {1, static_cast<std::size_t>(n), static_cast<std::size_t>(n)};
      for (const auto& o : outputs) {
        const auto& values = o.grid->values();
        for (std::size_t e = 0; e < values.size(); ++e) buffer[e] = static_cast<float>(values[e] * o.scale);
        nc_ok(nc_put_vara_float(nc, o.var, start, count, buffer.data()), o.name, path);
      }
    }
    advance();
  }
  nc_ok(nc_close(nc), "close", path);
  return fmt::format("wrote {}: {} hourly steps x 8 variables (u10 v10 msl t2m tcwv tcc tp z500) on a {}x{} grid, "
                     "lat {}..{} N, lon {}..{} E",
                     path.string(), hours, n, n, lat_north, lat_south, lon_west, lon_east);
}

}  // namespace bellows::example_data
