# The PyTorch peer's graph network (W6; bench/peers/peer.py): src/models/gnn.cpp's modules and the regional mesh
# graph of src/models/mesh.cpp, built as bellows builds them (same edges, same order, same features).
import math

import torch
import torch.nn as nn
import torch.nn.functional as F

from peer_models import Linear


class GraphMlp(nn.Module):
    """src/models/gnn.cpp GraphMlpImpl: layers = Linear(in, hidden), [act, Linear(hidden, hidden)]..., act,
    Linear(hidden, out); LayerNorm(out) as "norm" when asked. tail() starts after the first Linear."""

    def __init__(self, i, hidden, o, hidden_layers, activation="silu", layer_norm=True):
        super().__init__()
        widths = [i] + [hidden] * hidden_layers + [o]
        self.layers = nn.ModuleList([Linear(a, b) for a, b in zip(widths[:-1], widths[1:])])
        self.norm = nn.LayerNorm(o) if layer_norm else None
        self.activation = activation

    def act(self, x):
        return {"silu": F.silu, "gelu": F.gelu, "relu": F.relu, "tanh": torch.tanh}[self.activation](x)

    def forward(self, x):
        return self.tail(self.layers[0](x))

    def tail(self, h):
        for i, layer in enumerate(self.layers):
            if i > 0:
                h = layer(h)
            if i + 1 < len(self.layers):
                h = self.act(h)
        return self.norm(h) if self.norm is not None else h


class Interaction(nn.Module):
    """InteractionImpl: edge update from [edge, sender, receiver] (the first Linear as three products, node terms
    per node then gathered), sum of incoming edges per receiver, node update; both residual."""

    def __init__(self, latent, hidden_layers, activation, layer_norm):
        super().__init__()
        self.edge_mlp = GraphMlp(3 * latent, latent, latent, hidden_layers, activation, layer_norm)
        self.node_mlp = GraphMlp(2 * latent, latent, latent, hidden_layers, activation, layer_norm)

    def forward(self, senders, receivers, edges, sender_index, receiver_index):
        first = self.edge_mlp.layers[0]
        le, ls = edges.size(-1), senders.size(-1)
        w = first.weight
        # The three terms are made receiver first, then sender, then edge: the order GCC evaluated the operands of
        # the C++ sum in bellows' build, which fixes the order autograd sums the gradients of tensors used by
        # several of them (fp32 losses then agree bitwise; left to right they differ by ~1e-7).
        r = F.linear(receivers, w.narrow(1, le + ls, receivers.size(-1))).index_select(-2, receiver_index)
        s = F.linear(senders, w.narrow(1, le, ls)).index_select(-2, sender_index)
        h = F.linear(edges, w.narrow(1, 0, le), first.bias) + s + r
        e = edges + self.edge_mlp.tail(h)
        shape = list(e.shape)
        shape[-2] = receivers.size(-2)
        aggregated = torch.zeros(shape, dtype=e.dtype).index_add_(e.dim() - 2, receiver_index, e)
        r = receivers + self.node_mlp(torch.cat([receivers, aggregated.to(receivers.dtype)], -1))
        return r, e


def _lattice(n, step):
    out = list(range(0, n, step))
    if out[-1] != n - 1:
        out.append(n - 1)
    return out


def _sphere_positions(lat, lon, rows, cols):
    rad = math.pi / 180.0
    pos = []
    for r in rows:
        for c in cols:
            phi, lam = lat[r] * rad, lon[c] * rad
            pos.append((math.cos(phi) * math.cos(lam), math.cos(phi) * math.sin(lam), math.sin(phi)))
    return torch.tensor(pos, dtype=torch.float64)


def _triangulation(rows, cols, mesh_lon, edges):
    for a in range(len(rows)):
        for b in range(len(cols)):
            u = rows[a] * mesh_lon + cols[b]
            for da, db in ((0, 1), (1, 0), (1, 1)):
                if a + da < len(rows) and b + db < len(cols):
                    v = rows[a + da] * mesh_lon + cols[b + db]
                    edges.add((u, v))
                    edges.add((v, u))


def _edges(senders, receivers, sender_pos, receiver_pos):
    s, r = torch.tensor(senders, dtype=torch.long), torch.tensor(receivers, dtype=torch.long)
    d = sender_pos.index_select(0, s) - receiver_pos.index_select(0, r)
    f = torch.cat([d, torch.linalg.vector_norm(d, 2, dim=1, keepdim=True)], 1)
    longest = f.select(1, 3).max().item()
    return s, r, (f / longest if longest > 0 else f)


def regional_graph(lat, lon, stride=4, levels=1, g2m_radius=0.6):
    """src/models/mesh.cpp build_regional_graph: a lattice mesh over the grid's rows and columns (every stride-th,
    and the last), both directions of each triangle side on every level, grid->mesh edges within the radius (or
    the nearest), mesh->grid edges from the containing triangle's vertices; edge features [dx, dy, dz, |d|] over
    the longest; node features centred and scaled positions on the unit sphere."""
    import bisect
    n_lat, n_lon = len(lat), len(lon)
    mlat, mlon = _lattice(n_lat, stride), _lattice(n_lon, stride)
    gp = _sphere_positions(lat, lon, range(n_lat), range(n_lon))
    mp = _sphere_positions(lat, lon, mlat, mlon)
    centroid = gp.mean(0, True)
    spread = (gp - centroid).square().sum(1).mean().sqrt().item()
    scale = 1.0 / spread if spread > 0 else 1.0
    g = {"n_lat": n_lat, "n_lon": n_lon, "grid_features": (gp - centroid) * scale, "mesh_features": (mp - centroid) * scale}
    mesh_lat, mesh_lon = len(mlat), len(mlon)
    finest = set()
    _triangulation(_lattice(mesh_lat, 1), _lattice(mesh_lon, 1), mesh_lon, finest)
    every = set(finest)
    for level in range(1, min(levels, 62)):
        _triangulation(_lattice(mesh_lat, 1 << level), _lattice(mesh_lon, 1 << level), mesh_lon, every)
    pairs = sorted(every)
    g["mesh"] = _edges([p[0] for p in pairs], [p[1] for p in pairs], mp, mp)
    longest = 0.0
    for a, b in sorted(finest):
        dx, dy, dz = (mp[a, k].item() - mp[b, k].item() for k in range(3))
        longest = max(longest, math.sqrt(dx * dx + dy * dy + dz * dz))
    dist = torch.cdist(gp, mp)
    reach = dist.le(g2m_radius * longest)
    reach.scatter_(1, dist.argmin(1, True), True)
    nz = reach.nonzero()
    g["g2m"] = _edges(nz[:, 0].tolist(), nz[:, 1].tolist(), gp, mp)

    def cell_of(index, p):
        k = min(bisect.bisect_right(index, p) - 1, len(index) - 2)
        return k, (p - index[k]) / (index[k + 1] - index[k])

    senders, receivers = [], []
    for i in range(n_lat):
        a, u = cell_of(mlat, i)
        for j in range(n_lon):
            b, v = cell_of(mlon, j)
            node = lambda da, db: (a + da) * mesh_lon + (b + db)  # noqa: E731
            corner = node(0, 1) if v >= u else node(1, 0)
            for m in (node(0, 0), corner, node(1, 1)):
                senders.append(m)
                receivers.append(i * n_lon + j)
    g["m2g"] = _edges(senders, receivers, mp, gp)
    g["mesh_nodes"] = mesh_lat * mesh_lon
    return g


class Gnn(nn.Module):
    """GnnImpl: encode (grid and mesh embeddings, grid -> mesh interaction, grid update), process (message
    passing on the mesh), decode (mesh -> grid interaction, output MLP), plus the input of each target channel
    (residual)."""

    def __init__(self, lat, lon, in_channels=8, out_channels=8, latent=128, layers=6, mlp_layers=1, stride=4,
                 levels=2, g2m_radius=0.6, activation="silu", layer_norm=True, residual=True):
        super().__init__()
        self.graph = regional_graph(lat, lon, stride, levels, g2m_radius)
        self.latent, self.in_channels, self.out_channels = latent, in_channels, out_channels
        self.residual = residual
        mlp = lambda i, o, norm: GraphMlp(i, latent, o, mlp_layers, activation, norm)  # noqa: E731
        self.grid_embed = mlp(in_channels + 3, latent, layer_norm)
        self.mesh_embed = mlp(3, latent, layer_norm)
        self.g2m_edge_embed = mlp(4, latent, layer_norm)
        self.mesh_edge_embed = mlp(4, latent, layer_norm)
        self.m2g_edge_embed = mlp(4, latent, layer_norm)
        self.encoder = Interaction(latent, mlp_layers, activation, layer_norm)
        self.grid_update = mlp(latent, latent, layer_norm)
        self.processor = nn.ModuleList([Interaction(latent, mlp_layers, activation, layer_norm) for _ in range(layers)])
        self.decoder = Interaction(latent, mlp_layers, activation, layer_norm)
        self.output = mlp(latent, out_channels, False)
        self._cache = None
        self.on(torch.float32)  # made here, not in a compiled forward's first call (which would recompile after)

    def on(self, dtype):
        if self._cache is None or self._cache[0] != dtype:
            g = self.graph
            f = lambda t: t.to(dtype)  # noqa: E731
            self._cache = (dtype, {"grid": f(g["grid_features"]), "mesh": f(g["mesh_features"]),
                                   "g2m": (g["g2m"][0], g["g2m"][1], f(g["g2m"][2])),
                                   "mesh_edges": (g["mesh"][0], g["mesh"][1], f(g["mesh"][2])),
                                   "m2g": (g["m2g"][0], g["m2g"][1], f(g["m2g"][2])),
                                   "residual": torch.arange(self.out_channels) if self.residual else None})
        return self._cache[1]

    def forward(self, x):
        g, gr = self.on(x.dtype), self.graph
        b, n, m, l = x.size(0), gr["n_lat"] * gr["n_lon"], gr["mesh_nodes"], self.latent
        nodes = x.permute(0, 2, 3, 1).reshape(b, n, self.in_channels)
        grid = self.grid_embed(torch.cat([nodes, g["grid"].unsqueeze(0).expand(b, n, 3)], -1))
        mesh = self.mesh_embed(g["mesh"]).unsqueeze(0).expand(b, m, l)
        send, recv, feat = g["g2m"]
        mesh = self.encoder(grid, mesh, self.g2m_edge_embed(feat).unsqueeze(0), send, recv)[0]
        grid = grid + self.grid_update(grid)
        send, recv, feat = g["mesh_edges"]
        edges = self.mesh_edge_embed(feat).unsqueeze(0)
        for layer in self.processor:
            mesh, edges = layer(mesh, mesh, edges, send, recv)
        send, recv, feat = g["m2g"]
        grid = self.decoder(mesh, grid, self.m2g_edge_embed(feat).unsqueeze(0), send, recv)[0]
        y = self.output(grid).reshape(b, gr["n_lat"], gr["n_lon"], self.out_channels).permute(0, 3, 1, 2)
        if g["residual"] is not None:
            y = y + x.index_select(1, g["residual"])
        return y
