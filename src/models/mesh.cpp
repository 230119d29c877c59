// The regional grid and mesh graph; see mesh.h. The mesh is a lattice over the grid's own rows and columns,
// so containment (which triangle holds a grid node) is decided in index space, exactly, while distances and
// features use the true positions on the sphere.
#include "bellows/models/mesh.h"

#include <ATen/ATen.h>
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <numbers>
#include <set>
#include <string>
#include <utility>

#include "bellows/util/check.h"

namespace bellows::models {
namespace {

using EdgeList = std::set<std::pair<std::int64_t, std::int64_t>>;  // (sender, receiver), ordered and unique

void check_coordinate(const std::vector<double>& values, const std::string& name) {
  BELLOWS_CHECK_DATA(values.size() >= 2,
                     fmt::format("the graph network needs at least 2 {} values, the grid has {}", name, values.size()),
                     fmt::format("use a grid with at least 2 points along {} (and a {} coordinate variable in the file)", name, name));
  const bool increasing = values[1] > values[0];
  for (std::size_t i = 1; i < values.size(); ++i) {
    const bool ok = std::isfinite(values[i]) && (increasing ? values[i] > values[i - 1] : values[i] < values[i - 1]);
    BELLOWS_CHECK_DATA(ok,
                       fmt::format("{} is not strictly monotonic: {}[{}] = {}, {}[{}] = {}", name, name, i - 1, values[i - 1],
                                   name, i, values[i]),
                       fmt::format("the {} coordinate must increase or decrease along the grid (a regular regional grid)", name));
  }
}

// Lattice positions 0, step, 2 step, ... below n, and n - 1.
std::vector<std::int64_t> lattice(std::int64_t n, std::int64_t step) {
  std::vector<std::int64_t> out;
  for (std::int64_t i = 0; i < n; i += step) out.push_back(i);
  if (out.back() != n - 1) out.push_back(n - 1);
  return out;
}

// Unit-sphere positions [rows * cols, 3] of the points (lat[r], lon[c]), row-major.
at::Tensor sphere_positions(const std::vector<double>& lat, const std::vector<double>& lon,
                            const std::vector<std::int64_t>& rows, const std::vector<std::int64_t>& cols) {
  constexpr double kRad = std::numbers::pi / 180.0;
  at::Tensor pos = at::empty({static_cast<std::int64_t>(rows.size() * cols.size()), 3}, at::kDouble);
  auto p = pos.accessor<double, 2>();
  std::int64_t k = 0;
  for (const std::int64_t r : rows) {
    for (const std::int64_t c : cols) {
      const double phi = lat[static_cast<std::size_t>(r)] * kRad, lambda = lon[static_cast<std::size_t>(c)] * kRad;
      p[k][0] = std::cos(phi) * std::cos(lambda);
      p[k][1] = std::cos(phi) * std::sin(lambda);
      p[k][2] = std::sin(phi);
      ++k;
    }
  }
  return pos;
}

// Both directions of every side of the triangles of a lattice of mesh nodes (mesh rows `rows`, mesh columns
// `cols`): each cell splits along its (0,0)-(1,1) diagonal.
void add_triangulation(const std::vector<std::int64_t>& rows, const std::vector<std::int64_t>& cols, std::int64_t mesh_lon,
                       EdgeList& edges) {
  const auto id = [&](std::size_t a, std::size_t b) { return rows[a] * mesh_lon + cols[b]; };
  const auto both = [&](std::int64_t u, std::int64_t v) {
    edges.emplace(u, v);
    edges.emplace(v, u);
  };
  for (std::size_t a = 0; a < rows.size(); ++a) {
    for (std::size_t b = 0; b < cols.size(); ++b) {
      if (b + 1 < cols.size()) both(id(a, b), id(a, b + 1));
      if (a + 1 < rows.size()) both(id(a, b), id(a + 1, b));
      if (a + 1 < rows.size() && b + 1 < cols.size()) both(id(a, b), id(a + 1, b + 1));
    }
  }
}

EdgeSet make_edges(const std::vector<std::int64_t>& senders, const std::vector<std::int64_t>& receivers,
                   const at::Tensor& sender_pos, const at::Tensor& receiver_pos) {
  EdgeSet e;
  e.senders = at::tensor(senders, at::kLong);
  e.receivers = at::tensor(receivers, at::kLong);
  const at::Tensor d = sender_pos.index_select(0, e.senders) - receiver_pos.index_select(0, e.receivers);
  const at::Tensor f = at::cat({d, d.norm(2, {1}, true)}, 1);
  const double longest = f.select(1, 3).max().item<double>();
  e.features = longest > 0 ? f / longest : f;
  return e;
}

// Index of the lattice cell [index[k], index[k + 1]] holding position p, and p's fraction across it.
std::pair<std::size_t, double> cell_of(const std::vector<std::int64_t>& index, std::int64_t p) {
  const auto it = std::upper_bound(index.begin(), index.end(), p);
  std::size_t k = static_cast<std::size_t>(it - index.begin()) - 1;
  k = std::min(k, index.size() - 2);
  return {k, static_cast<double>(p - index[k]) / static_cast<double>(index[k + 1] - index[k])};
}

}  // namespace

RegionalGraph build_regional_graph(const std::vector<double>& lat, const std::vector<double>& lon, const MeshOptions& options) {
  BELLOWS_CHECK_CONFIG(options.stride >= 1, fmt::format("mesh stride {} is below 1", options.stride),
                       "set model.mesh_stride to the grid points per mesh cell side (e.g. 4)");
  BELLOWS_CHECK_CONFIG(options.levels >= 1, fmt::format("mesh levels {} is below 1", options.levels), "set model.mesh_levels to 1 or more");
  BELLOWS_CHECK_CONFIG(options.g2m_radius > 0, fmt::format("grid-to-mesh radius {} is not positive", options.g2m_radius),
                       "set model.g2m_radius to a fraction of the mesh edge length (e.g. 0.6)");
  check_coordinate(lat, "lat");
  check_coordinate(lon, "lon");

  RegionalGraph g;
  g.n_lat = static_cast<std::int64_t>(lat.size());
  g.n_lon = static_cast<std::int64_t>(lon.size());
  g.mesh_lat_index = lattice(g.n_lat, options.stride);
  g.mesh_lon_index = lattice(g.n_lon, options.stride);
  g.grid_positions = sphere_positions(lat, lon, lattice(g.n_lat, 1), lattice(g.n_lon, 1));
  g.mesh_positions = sphere_positions(lat, lon, g.mesh_lat_index, g.mesh_lon_index);

  // --- static node features: one centring and scaling for both node sets ---
  const at::Tensor centroid = g.grid_positions.mean(0, true);
  const double spread = (g.grid_positions - centroid).square().sum(1).mean().sqrt().item<double>();
  const double scale = spread > 0 ? 1.0 / spread : 1.0;
  g.grid_features = (g.grid_positions - centroid) * scale;
  g.mesh_features = (g.mesh_positions - centroid) * scale;

  // --- mesh edges: the finest triangulation, then every coarser level's ---
  const std::int64_t mesh_lon = g.mesh_lon();
  EdgeList finest, all;
  add_triangulation(lattice(g.mesh_lat(), 1), lattice(mesh_lon, 1), mesh_lon, finest);
  all = finest;
  for (std::int64_t level = 1; level < options.levels && level < 62; ++level) {
    add_triangulation(lattice(g.mesh_lat(), std::int64_t{1} << level), lattice(mesh_lon, std::int64_t{1} << level), mesh_lon, all);
  }
  std::vector<std::int64_t> senders, receivers;
  for (const auto& [s, r] : all) senders.push_back(s), receivers.push_back(r);
  g.mesh = make_edges(senders, receivers, g.mesh_positions, g.mesh_positions);

  // --- grid -> mesh: mesh nodes within the radius, or the nearest ---
  double longest = 0;
  {
    const auto p = g.mesh_positions.accessor<double, 2>();
    for (const auto& [s, r] : finest) {
      const double dx = p[s][0] - p[r][0], dy = p[s][1] - p[r][1], dz = p[s][2] - p[r][2];
      longest = std::max(longest, std::sqrt(dx * dx + dy * dy + dz * dz));
    }
  }
  const at::Tensor dist = at::cdist(g.grid_positions, g.mesh_positions);  // [grid, mesh]
  at::Tensor reach = dist.le(options.g2m_radius * longest);
  reach.scatter_(1, dist.argmin(1, true), true);
  const at::Tensor pairs = reach.nonzero();  // row-major: sorted by grid node, then mesh node
  const at::Tensor mesh_of_pair = pairs.select(1, 1).contiguous();
  const at::Tensor grid_of_pair = pairs.select(1, 0).contiguous();
  senders.assign(grid_of_pair.data_ptr<std::int64_t>(), grid_of_pair.data_ptr<std::int64_t>() + grid_of_pair.numel());
  receivers.assign(mesh_of_pair.data_ptr<std::int64_t>(), mesh_of_pair.data_ptr<std::int64_t>() + mesh_of_pair.numel());
  g.grid_to_mesh = make_edges(senders, receivers, g.grid_positions, g.mesh_positions);

  // --- mesh -> grid: the 3 vertices of the containing triangle ---
  senders.clear();
  receivers.clear();
  for (std::int64_t i = 0; i < g.n_lat; ++i) {
    const auto [a, u] = cell_of(g.mesh_lat_index, i);
    for (std::int64_t j = 0; j < g.n_lon; ++j) {
      const auto [b, v] = cell_of(g.mesh_lon_index, j);
      const auto node = [&](std::size_t da, std::size_t db) {
        return static_cast<std::int64_t>(a + da) * mesh_lon + static_cast<std::int64_t>(b + db);
      };
      // The cell splits along its (0,0)-(1,1) diagonal, as in add_triangulation.
      const std::int64_t corner = v >= u ? node(0, 1) : node(1, 0);
      for (const std::int64_t m : {node(0, 0), corner, node(1, 1)}) {
        senders.push_back(m);
        receivers.push_back(i * g.n_lon + j);
      }
    }
  }
  g.mesh_to_grid = make_edges(senders, receivers, g.mesh_positions, g.grid_positions);
  return g;
}

}  // namespace bellows::models
