// The graph of the regional weather model (seed 000, workload W6): grid nodes at the NetCDF file's lat x lon
// points, a coarser triangulated mesh over the same region, and the three edge sets the network passes
// messages along (grid -> mesh, mesh <-> mesh, mesh -> grid), with geometric node and edge features.
// Built once on the CPU in float64; the network (gnn.h) copies it to the training device and dtype.
//   auto g = build_regional_graph(ds->lat(), ds->lon(), {.stride = 4});
//   g.mesh.senders, g.mesh.receivers;  // int64 [E], both directions of every triangle side
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <vector>

namespace bellows::models {

struct MeshOptions {
  // Grid points per mesh cell side: mesh rows lie on grid rows 0, s, 2s, ... and the last row (likewise
  // columns), so every mesh node sits on a grid node and the mesh spans the whole region.
  std::int64_t stride = 4;
  // Mesh scales (GraphCast's multi-mesh): level k adds the triangulation of every 2^k-th mesh row and column
  // (and the last), giving long-range edges between the same nodes. Levels past the coarsest lattice (the
  // region's corners) add nothing.
  std::int64_t levels = 1;
  // Grid -> mesh edges join each grid node to the mesh nodes within this fraction of the longest edge of the
  // finest mesh (GraphCast: 0.6); a grid node with none in reach is joined to its nearest mesh node.
  double g2m_radius = 0.6;
};

// One directed edge set. Node indices are row-major: grid node i * n_lon + j; mesh node a * mesh_lon + b.
struct EdgeSet {
  at::Tensor senders;    // int64 [E]
  at::Tensor receivers;  // int64 [E]
  // float64 [E, 4]: sender minus receiver position on the unit sphere (3) and its length, all divided by the
  // longest edge of the set, so features lie in [-1, 1] whatever the region's size.
  at::Tensor features;
  std::int64_t size() const { return senders.defined() ? senders.size(0) : 0; }
};

struct RegionalGraph {
  std::int64_t n_lat = 0, n_lon = 0;
  std::vector<std::int64_t> mesh_lat_index, mesh_lon_index;  // the grid rows and columns of the mesh lattice
  at::Tensor grid_positions, mesh_positions;                 // float64 [N, 3] on the unit sphere
  // Static node features, float64 [N, 3]: positions minus the grid's centroid, divided by the grid's RMS
  // distance from it (the same transform for both node sets).
  at::Tensor grid_features, mesh_features;
  EdgeSet grid_to_mesh;  // senders: grid nodes, receivers: mesh nodes
  EdgeSet mesh;          // mesh -> mesh, every level, both directions, no duplicates, no self-loops
  EdgeSet mesh_to_grid;  // each grid node receives from the 3 vertices of the mesh triangle that contains it

  std::int64_t grid_nodes() const { return n_lat * n_lon; }
  std::int64_t mesh_lat() const { return static_cast<std::int64_t>(mesh_lat_index.size()); }
  std::int64_t mesh_lon() const { return static_cast<std::int64_t>(mesh_lon_index.size()); }
  std::int64_t mesh_nodes() const { return mesh_lat() * mesh_lon(); }
};

// lat and lon in degrees, each strictly monotonic (either direction) with at least 2 values: a kData error
// otherwise. The region is not wrapped around in longitude (regional grids have edges). kConfig errors for
// stride or levels below 1 and a radius that is not positive.
RegionalGraph build_regional_graph(const std::vector<double>& lat, const std::vector<double>& lon, const MeshOptions& options);

}  // namespace bellows::models
