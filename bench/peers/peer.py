# The PyTorch (Python) peer of bellows' reference workloads W1..W7 (/work/shared/WORKLOADS.md): the same model
# (state_dict names and shapes equal to bellows' LibTorch module tree, so one safetensors file starts both),
# the same batches in the same order as `bellows train ... data.shuffle=false data.val_fraction=0` (W4: the same
# random flips), the same loss, AdamW on PyTorch's fused kernel with bellows' weight-decay grouping, gradient
# clipping and accumulation where the example config has them, and a constant learning rate.
#   peer.py --workload W1 --data features.csv --write-init init.safetensors      (seeded init, then exit)
#   peer.py --workload W1 --data features.csv --init init.safetensors --steps 50 --warmup 5 \
#           --mode eager|compile|reduce-overhead|max-autotune-no-cudagraphs --precision fp32|bf16-mixed \
#           --threads 2 --json out.json
#   peer.py --workload W3 --twin ...   the workload's host-bound twin (TWINS: W1, W3, W4, W5 shrunk until a step is
#                                      mostly launch and dispatch; bench/peers/host_twins.py)
# --mode compile is torch.compile's default mode; reduce-overhead and max-autotune-no-cudagraphs are torch.compile's
# modes of those names (reduce-overhead's CUDA graphs apply on CUDA only: on a CPU it compiles as the default does,
# without graphs). Every compiled mode reports compile_s apart from the steady state (see main()).
# Random draws (W3's dropout, W5's timesteps and noise, W7's head dropout) come from the global CPU generator
# seeded with the run's seed (0) before the model is built, whose construction draws as bellows' does, in the
# order bellows draws them (src/app/run.cpp, src/models/ddpm.cpp), so eager runs give bellows' losses step for
# step (compiled runs draw dropout masks their own way). bench/peers/check.py compares the two.
# Data is read into memory before the timed steps; every step's loss is a host read (loss.item()).
import time

_T_SCRIPT = time.perf_counter()  # the script's first line; startup_s counts from the process start (below)
_WALL_SCRIPT = time.time()

import os  # noqa: E402
import sys  # noqa: E402

if "--cold-compile" in sys.argv:  # before torch is imported: inductor reads it then
    os.environ["TORCHINDUCTOR_FORCE_DISABLE_CACHES"] = "1"

import argparse  # noqa: E402
import json  # noqa: E402
import math  # noqa: E402
import statistics  # noqa: E402

import numpy as np  # noqa: E402
import torch  # noqa: E402
import torch.nn as nn  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from safetensors.torch import load_file, save_file  # noqa: E402

_IMPORT_S = time.perf_counter() - _T_SCRIPT

MODES = ("eager", "compile", "reduce-overhead", "max-autotune-no-cudagraphs")

# Names exempt from weight decay besides every tensor of <= 1 dimension: bellows' optim.no_decay default
# (src/app/schema.cpp, src/train/optimizer.cpp no_decay()).
NO_DECAY = ("bias", "norm", "bn", "ln")


def process_start_wall():
    """Wall-clock time at which this process started (Linux /proc), else the script's first line."""
    try:
        with open("/proc/self/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        start_ticks = int(fields[19])  # field 22 of stat; fields[0] is field 3 (state)
        with open("/proc/stat") as f:
            btime = next(int(line.split()[1]) for line in f if line.startswith("btime"))
        return btime + start_ticks / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError, StopIteration):
        return _WALL_SCRIPT


class CppLinear(nn.Linear):
    """LibTorch's torch::nn::Linear::forward (torch/csrc/api/include/torch/nn/functional/linear.h): addmm for 2-D
    inputs like at::linear, but for 3-D inputs matmul and then `output += bias`, not at::linear's fused addmm. In
    fp32 the backward sums differ in the last bits (~1e-7 in the losses); under bf16 autocast the C++ form rounds
    the product to bf16 and then adds the fp32 bias (a second rounding, and an fp32 copy of the output), where
    at::linear adds a bf16 bias inside the gemm: W3's and W6's bf16 losses differ by ~1e-3 to 1e-2. bellows'
    transformer and graph network called it until commit ed3a21b ("Models: at::linear for 3-D inputs"); since then
    they call at::linear, as nn.Linear does, and the plain peer agrees bitwise. --cpp-linear reproduces the older
    builds exactly."""

    def forward(self, x):
        if x.dim() == 2:
            return torch.addmm(self.bias, x, self.weight.t())
        out = x.matmul(self.weight.t())
        out += self.bias
        return out


LINEAR = {"cls": nn.Linear}  # --cpp-linear swaps in CppLinear (same parameters, same initialisation draws)


def Linear(i, o):  # noqa: N802 (reads like the module it builds)
    return LINEAR["cls"](i, o)


# ----------------------------------------------------------------------------------------------------------------
# Models: module attribute names are the names bellows' C++ modules register (register_module/register_parameter),
# and parameters are created in the same order, so that building the model consumes the global generator exactly
# as bellows' constructor does (what follows, dropout and DDPM draws, then sees the same generator state).
# ----------------------------------------------------------------------------------------------------------------


class Mlp(nn.Module):
    """src/models/mlp.cpp: layers = Sequential(Linear, GELU, ..., Linear); GELU entries hold no parameters."""

    def __init__(self, in_features=64, hidden=(512, 512, 512), out_features=1):
        super().__init__()
        seq, width = [], in_features
        for h in hidden:
            seq += [Linear(width, h), nn.GELU()]
            width = h
        seq.append(Linear(width, out_features))
        self.layers = nn.Sequential(*seq)

    def forward(self, x):
        return self.layers(x)


class Lstm(nn.Module):
    """src/models/rnn.cpp RnnModelImpl: rnn = LSTM(batch_first), head = Linear on the last layer's final h."""

    def __init__(self, in_features=16, hidden_size=128, num_layers=2, out_features=16, dropout=0.0):
        super().__init__()
        self.num_layers, self.hidden_size = num_layers, hidden_size
        self.rnn = nn.LSTM(in_features, hidden_size, num_layers=num_layers, dropout=dropout, batch_first=True)
        self.head = Linear(hidden_size, out_features)

    def forward(self, x):
        _, (h, _) = self.rnn(x)
        b = x.size(0)
        last = h.view(self.num_layers, 1, b, self.hidden_size).select(0, self.num_layers - 1)
        return self.head(last.transpose(0, 1).reshape(b, self.hidden_size))


class SelfAttention(nn.Module):
    """The "self_attn" submodule of bellows' encoder layer: nn.MultiheadAttention's tensor names."""

    def __init__(self, d):
        super().__init__()
        self.in_proj_weight = nn.Parameter(torch.empty(3 * d, d))
        self.in_proj_bias = nn.Parameter(torch.zeros(3 * d))
        self.out_proj = Linear(d, d)  # its init draws before in_proj_weight's, as in the C++ constructor
        with torch.no_grad():
            nn.init.xavier_uniform_(self.in_proj_weight)
            self.out_proj.bias.zero_()


class EncoderLayer(nn.Module):
    """src/models/transformer.cpp TransformerEncoderLayerImpl: pre-LN, ATen's scaled-dot-product attention."""

    def __init__(self, d, heads, ff, dropout, activation="gelu"):
        super().__init__()
        self.d, self.heads, self.p, self.activation = d, heads, dropout, activation
        self.self_attn = SelfAttention(d)
        self.linear1 = Linear(d, ff)
        self.linear2 = Linear(ff, d)
        self.norm1 = nn.LayerNorm(d)
        self.norm2 = nn.LayerNorm(d)
        self.dropout = nn.Dropout(dropout)

    def attention(self, x, attend=None):
        b, t, d, h = x.size(0), x.size(1), self.d, self.heads
        a = self.self_attn
        qkv = F.linear(x, a.in_proj_weight, a.in_proj_bias).view(b, t, 3, h, d // h).permute(2, 0, 3, 1, 4)
        p = self.p if self.training else 0.0
        out = F.scaled_dot_product_attention(qkv[0], qkv[1], qkv[2], attend, p)
        return a.out_proj(out.transpose(1, 2).reshape(b, t, d))

    def forward(self, x, attend=None):
        h = x + self.dropout(self.attention(self.norm1(x), attend))
        f = self.linear1(self.norm2(h))
        f = F.relu(f) if self.activation == "relu" else F.gelu(f)
        return h + self.dropout(self.linear2(self.dropout(f)))


def sinusoidal_positions(length, d):
    """transformer.cpp sinusoidal_positions: float64, column 2i = sin, 2i+1 = cos."""
    position = torch.arange(length, dtype=torch.float64).unsqueeze(1)
    inv_freq = torch.exp(torch.arange(0, d, 2, dtype=torch.float64) * (-math.log(10000.0) / float(d)))
    angle = position * inv_freq
    return torch.stack([angle.sin(), angle.cos()], 2).reshape(length, d)


class Encoder(nn.Module):
    """TransformerEncoderImpl: positions (sinusoidal: not a tensor of the state), dropout, layers, final norm."""

    def __init__(self, d, heads, layers, ff, dropout, max_len, positions="sinusoidal", activation="gelu"):
        super().__init__()
        self.sinusoid = sinusoidal_positions(max_len, d) if positions == "sinusoidal" else None
        if positions == "learned":
            self.pos_embedding = nn.Parameter(torch.empty(max_len, d))
            with torch.no_grad():
                self.pos_embedding.normal_(0.0, 0.02)
        else:
            self.pos_embedding = None
        self.dropout = nn.Dropout(dropout)
        self.layers = nn.ModuleList([EncoderLayer(d, heads, ff, dropout, activation) for _ in range(layers)])
        self.norm = nn.LayerNorm(d)

    def forward(self, x, padding=None):
        steps = x.size(1)
        h = x
        if self.sinusoid is not None:
            h = h + self.sinusoid[:steps].to(x.dtype)
        if self.pos_embedding is not None:
            h = h + self.pos_embedding[:steps].to(x.dtype)
        h = self.dropout(h)
        attend = None
        if padding is not None:  # transformer.cpp attention_mask_from_padding: a row with no key attends to all
            attend = padding.logical_not()
            attend = attend.logical_or(attend.any(1, keepdim=True).logical_not()).view(padding.size(0), 1, 1, -1)
        for layer in self.layers:
            h = layer(h, attend)
        return self.norm(h)


class SequenceTransformer(nn.Module):
    """TransformerModelImpl (model "transformer"): input Linear, encoder, pooling "last", head Linear."""

    def __init__(self, in_features=16, d=256, heads=4, layers=4, ff=1024, dropout=0.1, max_len=128, out_features=16):
        super().__init__()
        self.input = Linear(in_features, d)
        self.encoder = Encoder(d, heads, layers, ff, dropout, max_len)
        self.head = Linear(d, out_features)

    def forward(self, x):
        out = self.encoder(self.input(x))
        return self.head(out.select(1, out.size(1) - 1))


def ddpm_betas(steps, schedule="linear"):
    """ddpm.cpp make_betas, float64."""
    if schedule == "linear":
        scale = 1000.0 / steps
        return torch.linspace(scale * 1e-4, scale * 0.02, steps, dtype=torch.float64).clamp_max(0.999)
    s = 0.008
    f = lambda t: math.cos((t / steps + s) / (1 + s) * math.pi / 2) ** 2  # noqa: E731
    return torch.tensor([min(1 - f(i + 1) / f(i), 0.999) for i in range(steps)], dtype=torch.float64)


class Ddpm(nn.Module):
    """src/models/ddpm.cpp DdpmImpl: context encoder, MLP denoiser with residual SiLU blocks, skip term."""

    def __init__(self, context_features=7, out_features=256, hidden=256, layers=2, time_embedding=32, steps=50,
                 schedule="linear", skip=True):
        super().__init__()
        self.time_embedding, self.steps, self.skip = time_embedding, steps, skip
        self.context_encoder = Linear(context_features, hidden)
        self.input = Linear(out_features + time_embedding + hidden, hidden)
        self.blocks = nn.ModuleList([Linear(hidden, hidden) for _ in range(layers - 1)])
        self.output = Linear(hidden, out_features)
        betas = ddpm_betas(steps, schedule)
        self.register_buffer("betas", betas.to(torch.float32))
        self.register_buffer("alphas_cumprod", (1 - betas).cumprod(0).to(torch.float32))

    @staticmethod
    def timestep_embedding(t, dim, dtype):
        half = dim // 2
        k = torch.arange(half, dtype=torch.float32, device=t.device)
        freqs = torch.exp(k * (-math.log(10000.0) / float(half)))
        args = t.to(torch.float32).unsqueeze(1) * freqs.unsqueeze(0)
        return torch.cat([args.cos(), args.sin()], 1).to(dtype)

    def q_sample(self, x0, t, noise):
        ab = self.alphas_cumprod.index_select(0, t).to(x0.dtype).view(x0.size(0), *([1] * (x0.dim() - 1)))
        return ab.sqrt() * x0 + (1 - ab).sqrt() * noise

    def forward(self, x_t, t, context):
        temb = self.timestep_embedding(t, self.time_embedding, x_t.dtype)
        c = F.silu(self.context_encoder(context))
        h = F.silu(self.input(torch.cat([x_t, temb, c.to(x_t.dtype)], 1)))
        for block in self.blocks:
            h = h + F.silu(block(h))
        eps = self.output(h)
        if self.skip:
            eps = eps + (1 - self.alphas_cumprod.index_select(0, t)).sqrt().to(x_t.dtype).unsqueeze(1) * x_t
        return eps


def conv(i, o, k, stride):
    return nn.Conv2d(i, o, k, stride=stride, padding=k // 2, bias=False)


class BasicBlock(nn.Module):
    """src/models/resnet.cpp BasicBlockImpl (torchvision's names; downsample = Sequential(1x1 conv, BatchNorm))."""

    def __init__(self, in_planes, planes, stride):
        super().__init__()
        self.conv1 = conv(in_planes, planes, 3, stride)
        self.bn1 = nn.BatchNorm2d(planes)
        self.conv2 = conv(planes, planes, 3, 1)
        self.bn2 = nn.BatchNorm2d(planes)
        self.downsample = (nn.Sequential(conv(in_planes, planes, 1, stride), nn.BatchNorm2d(planes))
                           if stride != 1 or in_planes != planes else None)

    def forward(self, x):
        out = self.bn1(self.conv1(x)).relu_()
        out = self.bn2(self.conv2(out))
        identity = self.downsample(x) if self.downsample is not None else x
        return out.add_(identity).relu_()


class ResNet(nn.Module):
    """ResNetImpl: stem imagenet (7x7/2 conv, BN, ReLU, 3x3/2 max pool), layer1..4 of BasicBlocks, fc. Init as
    torchvision's: Kaiming-normal (fan_out, ReLU) convolutions, BatchNorm weight 1 and bias 0."""

    def __init__(self, depth=18, num_classes=10, in_channels=3, base=64):
        super().__init__()
        stages = {18: [2, 2, 2, 2], 34: [3, 4, 6, 3]}[depth]
        self.conv1 = conv(in_channels, base, 7, 2)
        self.bn1 = nn.BatchNorm2d(base)
        in_planes = base
        for s, n in enumerate(stages):
            planes = base << s
            blocks = []
            for i in range(n):
                blocks.append(BasicBlock(in_planes, planes, 2 if (s > 0 and i == 0) else 1))
                in_planes = planes
            setattr(self, f"layer{s + 1}", nn.ModuleList(blocks))
        self.fc = Linear(in_planes, num_classes)
        self.stages = len(stages)
        with torch.no_grad():
            for m in self.modules():
                if isinstance(m, nn.Conv2d):
                    nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")
                elif isinstance(m, nn.BatchNorm2d):
                    m.weight.fill_(1.0)
                    m.bias.zero_()

    def forward(self, x):
        h = self.bn1(self.conv1(x)).relu_()
        h = F.max_pool2d(h, 3, 2, 1)
        for s in range(self.stages):
            for block in getattr(self, f"layer{s + 1}"):
                h = block(h)
        return self.fc(F.adaptive_avg_pool2d(h, 1).flatten(1))


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


class TextEncoder(nn.Module):
    """src/models/text_pair.cpp TextEncoderImpl: token and segment embeddings (N(0, 0.02), the pad row zero),
    then the Transformer encoder with learned positions."""

    def __init__(self, vocab, pad_id, d=256, heads=4, layers=4, ff=1024, dropout=0.1, max_len=128):
        super().__init__()
        self.token_embedding = nn.Embedding(vocab, d, padding_idx=pad_id)
        self.segment_embedding = nn.Embedding(2, d)
        with torch.no_grad():
            self.token_embedding.weight.normal_(0.0, 0.02)
            self.token_embedding.weight[pad_id].zero_()
            self.segment_embedding.weight.normal_(0.0, 0.02)
        self.transformer = Encoder(d, heads, layers, ff, dropout, max_len, positions="learned")

    def embed(self, tokens, segments):
        return self.token_embedding(tokens) + self.segment_embedding(segments.to(torch.long))


class TextPairClassifier(nn.Module):
    """TextPairClassifierImpl: encoder, [CLS] pooling, dropout, head. A frozen encoder has no gradients, runs in
    eval mode (no dropout) and under no_grad; only the head's dropout draws from the generator then."""

    def __init__(self, vocab, pad_id, num_classes=3, d=256, heads=4, layers=4, ff=1024, dropout=0.1, max_len=128,
                 freeze_encoder=True):
        super().__init__()
        self.encoder = TextEncoder(vocab, pad_id, d, heads, layers, ff, dropout, max_len)
        self.dropout = nn.Dropout(dropout)
        self.head = Linear(d, num_classes)
        if freeze_encoder:
            for p in self.encoder.parameters():
                p.requires_grad_(False)

    def frozen(self):
        return not any(p.requires_grad for p in self.encoder.parameters())

    def train(self, mode=True):
        super().train(mode)
        if mode and self.frozen():
            self.encoder.eval()
        return self

    def forward(self, tokens, segments, mask):
        frozen = self.frozen()
        with torch.set_grad_enabled(not frozen and torch.is_grad_enabled()):
            embedded = self.encoder.embed(tokens, segments)
        m = mask.to(torch.bool)
        with torch.set_grad_enabled(not (frozen and not embedded.requires_grad) and torch.is_grad_enabled()):
            encoded = self.encoder.transformer(embedded, m.logical_not())
        return self.head(self.dropout(encoded.select(1, 0)))


# ----------------------------------------------------------------------------------------------------------------
# Losses (src/models/tasks.cpp, rnn.cpp SequenceTask, ddpm.cpp DdpmTask), computed inside autocast as bellows does.
# ----------------------------------------------------------------------------------------------------------------


def regression_loss(pred, y):
    target = y.to(pred.dtype).view_as(pred)  # under bf16 autocast the target is rounded to bf16 first, as in bellows
    diff = pred.to(torch.float32) - target.to(torch.float32)
    return diff.square().mean()


def classification_loss(logits, y):
    return F.cross_entropy(logits.to(torch.float32), y.to(torch.long).view(-1))


class Objective(nn.Module):
    """model + loss as one module, so that --mode compile compiles the loss with the model."""

    def __init__(self, model, kind):
        super().__init__()
        self.model, self.kind = model, kind

    def forward(self, *tensors):
        if self.kind == "ddpm":
            x0, context, t, noise = tensors
            pred = self.model(self.model.q_sample(x0, t, noise), t, context)
            dtype = torch.promote_types(pred.dtype, torch.float32)
            return (pred.to(dtype) - noise.to(dtype)).square().mean()
        if self.kind == "text_pair":  # text_pair.cpp TextPairTask
            x, segments, mask, y = tensors
            return F.cross_entropy(self.model(x, segments, mask).to(torch.float32), y.to(torch.long).view(-1))
        x, y = tensors
        pred = self.model(x)
        return classification_loss(pred, y) if self.kind == "classification" else regression_loss(pred, y)


# ----------------------------------------------------------------------------------------------------------------
# Data, all in memory before timing: the batches bellows' sequential sampler gives (batch k: samples
# [k*B, min((k+1)*B, N)), the last one partial; data.drop_last=false), epoch after epoch.
# ----------------------------------------------------------------------------------------------------------------


def read_csv(path, target="y"):
    """The csv source (src/data/csv_reader.cpp): features = every column but the target, in header order; float32;
    no standardisation. Values are parsed as float64 and rounded to float32 (bellows parses straight to float32;
    the two agree for the example's 4-decimal values)."""
    with open(path) as f:
        header = [h.strip() for h in f.readline().rstrip("\r\n").split(",")]
    table = np.loadtxt(path, delimiter=",", skiprows=1, dtype=np.float64, ndmin=2).astype(np.float32)
    ti = header.index(target)
    features = [j for j in range(len(header)) if j != ti]
    x = torch.from_numpy(np.ascontiguousarray(table[:, features]))
    y = torch.from_numpy(np.ascontiguousarray(table[:, [ti]]))
    return x, y


def read_series(path):
    """The npy source's series (src/data/sources/npy.cpp read_series): floating arrays become float32."""
    a = np.load(path)
    if a.dtype.kind == "f" and a.dtype != np.float32:
        a = a.astype(np.float32)
    return torch.from_numpy(np.ascontiguousarray(a))


class RowBatches:
    """Contiguous row tensors sliced per batch (views, no copies)."""

    def __init__(self, tensors, batch_size):
        self.tensors, self.batch_size = tensors, batch_size
        self.n = tensors[0].size(0)
        self.per_epoch = (self.n + batch_size - 1) // batch_size

    def prepare(self, plan):
        pass

    def batch(self, epoch, k):
        a, b = k * self.batch_size, min((k + 1) * self.batch_size, self.n)
        return [t[a:b] for t in self.tensors]


class WindowBatches:
    """src/data/window.cpp: window i of series s starts at row (i % W) * stride of s, i // W = s; x = rows
    [start, start+length), y = target columns of rows [start+length, start+length+horizon). The batches a run
    needs are gathered once, before timing."""

    def __init__(self, series, length, stride, horizon, target_columns, batch_size, batches_needed):
        x = series if series.dim() == 3 else series.unsqueeze(0)
        s, t, _ = x.shape
        self.windows_per_series = (t - (length + horizon)) // stride + 1
        n = s * self.windows_per_series
        y = x.index_select(2, torch.tensor(target_columns, dtype=torch.long)) if target_columns else x
        flat_x, flat_y = x.reshape(s * t, -1), y.reshape(s * t, -1)
        self.per_epoch = (n + batch_size - 1) // batch_size
        self.batches = []
        for k in range(min(batches_needed, self.per_epoch)):
            idx = torch.arange(k * batch_size, min((k + 1) * batch_size, n))
            first = (idx // self.windows_per_series) * t + (idx % self.windows_per_series) * stride
            base = first.unsqueeze(1)
            xi = (base + torch.arange(0, length)).view(-1)
            yi = (base + torch.arange(length, length + horizon)).view(-1)
            self.batches.append([flat_x.index_select(0, xi).view(len(idx), length, -1),
                                 flat_y.index_select(0, yi).view(len(idx), horizon, -1)])

    def prepare(self, plan):
        pass

    def batch(self, epoch, k):
        return self.batches[k]


def read_npz(path, x_name, y_name):
    z = np.load(path)
    return [torch.from_numpy(np.ascontiguousarray(z[n].astype(np.float32) if z[n].dtype.kind == "f" else z[n]))
            for n in (x_name, y_name)]


def mix_seed(seed, index):
    """src/data/dataset.cpp mix_seed: splitmix64 over (seed, index), in uint64 arithmetic."""
    m = (1 << 64) - 1
    z = (seed + 0x9E3779B97F4A7C15 * (index + 1)) & m
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & m
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & m
    return z ^ (z >> 31)


def _png_chunks(raw, name):
    if raw[:8] != b"\x89PNG\r\n\x1a\n":
        raise ValueError(f"{name}: not a PNG file")
    pos, ihdr, idat = 8, None, []
    while pos < len(raw):
        length = int.from_bytes(raw[pos:pos + 4], "big")
        kind = raw[pos + 4:pos + 8]
        body = raw[pos + 8:pos + 8 + length]
        if kind == b"IHDR":
            ihdr = body
        elif kind == b"IDAT":
            idat.append(body)
        elif kind == b"IEND":
            break
        pos += 12 + length
    w, h = int.from_bytes(ihdr[0:4], "big"), int.from_bytes(ihdr[4:8], "big")
    depth, color, interlace = ihdr[8], ihdr[9], ihdr[12]
    channels = {0: 1, 2: 3, 4: 2, 6: 4}.get(color)
    if depth != 8 or channels is None or interlace != 0:
        raise ValueError(f"{name}: PNG bit depth {depth}, colour type {color}, interlace {interlace}: the built-in "
                         "decoder reads 8-bit non-interlaced gray/RGB/RGBA only (install Pillow for the others)")
    return h, w, channels, b"".join(idat)


def decode_pngs(files):
    """8-bit non-interlaced PNGs of one size to uint8 [N, H, W, C] with zlib and numpy: the five row filters are
    undone for all images at once, row by row (Sub/Average/Paeth pixel by pixel across the images)."""
    import zlib
    heads = []
    for f in files:
        with open(f, "rb") as fh:
            heads.append(_png_chunks(fh.read(), f))
    h, w, c, _ = heads[0]
    if any(hd[:3] != (h, w, c) for hd in heads):
        raise ValueError("images of different sizes or channel counts (install Pillow)")
    stride = w * c
    raw = np.stack([np.frombuffer(zlib.decompress(hd[3]), np.uint8).reshape(h, stride + 1) for hd in heads])
    n = raw.shape[0]
    out = np.zeros((n, h, stride), np.uint8)
    prior = np.zeros((n, stride), np.int32)
    for r in range(h):
        ft = raw[:, r, 0]
        cur = raw[:, r, 1:].astype(np.int32)
        row = np.where((ft == 2)[:, None], (cur + prior) & 255, cur)  # None (0) and Up (2)
        left_kinds = np.isin(ft, (1, 3, 4))
        if left_kinds.any():
            idx = np.nonzero(left_kinds)[0]
            f, a, p = ft[idx][:, None], cur[idx], prior[idx]
            res = np.empty_like(a)
            left = np.zeros((len(idx), c), np.int32)
            upleft = np.zeros((len(idx), c), np.int32)
            for j in range(w):
                sl = slice(j * c, (j + 1) * c)
                up = p[:, sl]
                pa, pb, pc = np.abs(up - upleft), np.abs(left - upleft), np.abs(left + up - 2 * upleft)
                paeth = np.where((pa <= pb) & (pa <= pc), left, np.where(pb <= pc, up, upleft))
                pred = np.where(f == 1, left, np.where(f == 3, (left + up) >> 1, paeth))
                left = (a[:, sl] + pred) & 255
                res[:, sl] = left
                upleft = up
            row[idx] = res
        out[:, r] = row
        prior = row
    return torch.from_numpy(out.reshape(n, h, w, c))


class ImageFolderBatches:
    """src/data/image_folder.cpp with the example's settings (no resize or crop; hflip), or a center crop (data.images.crop
    with random_crop=false: top (H - h) // 2, left (W - w) // 2, no draw; W4's twin): classes are the sorted
    subfolders, files sorted below each; uint8 HWC -> CHW; in training each sample flips with the first draw of
    SampleRandom(mix_seed(epoch_seed, index)), epoch_seed = mix_seed(mix_seed(seed, 0xA11CE), epoch) (loader.cpp);
    then x = addcmul(shift, x, scale) in float32 (finish_on_device), channels_last where the run uses it."""

    EXT = (".png", ".jpg", ".jpeg")

    def __init__(self, root, batch_size, seed=0, hflip=True, mean=(0.485, 0.456, 0.406), std=(0.229, 0.224, 0.225),
                 channels_last=True, crop=None):
        classes = sorted(d for d in os.listdir(root) if os.path.isdir(os.path.join(root, d)) and not d.startswith("."))
        files, labels = [], []
        for label, cls in enumerate(classes):
            found = []
            for dirpath, dirnames, names in os.walk(os.path.join(root, cls), followlinks=True):
                dirnames[:] = [d for d in dirnames if not d.startswith(".")]
                found += [os.path.relpath(os.path.join(dirpath, n), root) for n in names
                          if not n.startswith(".") and n.lower().endswith(self.EXT)]
            found.sort()
            files += found
            labels += [label] * len(found)
        paths = [os.path.join(root, f) for f in files]
        try:
            from PIL import Image
            hwc = torch.from_numpy(np.stack([np.asarray(Image.open(p).convert("RGB")) for p in paths]))
        except ImportError:
            hwc = decode_pngs(paths)
        chw = hwc.permute(0, 3, 1, 2)  # uint8 [N, C, H, W]
        if crop:  # the center crop, before the flip (image_folder.cpp: crop, then flip)
            (ch, cw), (h, w) = crop, chw.shape[-2:]
            if ch > h or cw > w:
                raise ValueError(f"{root}: images of {h}x{w} are smaller than the crop {ch}x{cw}")
            chw = chw[:, :, (h - ch) // 2:(h - ch) // 2 + ch, (w - cw) // 2:(w - cw) // 2 + cw]
        self.images = chw.contiguous()
        self.labels = torch.tensor(labels, dtype=torch.long)
        self.n, self.batch_size, self.seed, self.hflip = len(files), batch_size, seed, hflip
        self.per_epoch = (self.n + batch_size - 1) // batch_size
        self.scale = torch.tensor([1.0 / (255.0 * s) for s in std], dtype=torch.float32).view(1, -1, 1, 1)
        self.shift = torch.tensor([-m / s for m, s in zip(mean, std)], dtype=torch.float32).view(1, -1, 1, 1)
        self.channels_last = channels_last
        self.cache = {}

    def flips(self, epoch, indices):
        epoch_seed = mix_seed(mix_seed(self.seed, 0xA11CE), epoch)
        return torch.tensor([(mix_seed(mix_seed(epoch_seed, i), 0) >> 63) != 0 for i in indices], dtype=torch.bool)

    def prepare(self, plan):
        """The uint8 batches of the (epoch, batch) pairs a run visits, flipped, before timing."""
        for epoch, k in plan:
            if (epoch, k) in self.cache:
                continue
            idx = torch.arange(k * self.batch_size, min((k + 1) * self.batch_size, self.n))
            x = self.images.index_select(0, idx)
            if self.hflip:
                flip = self.flips(epoch, idx.tolist())
                x = torch.where(flip.view(-1, 1, 1, 1), x.flip(3), x)
            self.cache[(epoch, k)] = (x, self.labels.index_select(0, idx))

    def batch(self, epoch, k):
        x, y = self.cache[(epoch, k)]
        x = torch.addcmul(self.shift, x.to(torch.float32), self.scale)
        if self.channels_last:
            x = x.contiguous(memory_format=torch.channels_last)
        return [x, y]


class NetcdfFile:
    """The few netCDF C library calls the netcdf source makes (src/data/netcdf_file.cpp), through ctypes: no
    Python netCDF package is needed, the library bellows links is enough."""

    def __init__(self, path):
        import ctypes
        import ctypes.util
        self.ct = ctypes
        self.lib = ctypes.CDLL(ctypes.util.find_library("netcdf") or "libnetcdf.so")
        self.ncid = ctypes.c_int()
        self.check(self.lib.nc_open(path.encode(), 0, ctypes.byref(self.ncid)), path)
        self.path = path

    def check(self, status, what):
        if status != 0:
            self.lib.nc_strerror.restype = self.ct.c_char_p
            raise OSError(f"netCDF: {what}: {self.lib.nc_strerror(status).decode()}")

    def dim(self, dimid):
        name, length = self.ct.create_string_buffer(256), self.ct.c_size_t()
        self.check(self.lib.nc_inq_dim(self.ncid, dimid, name, self.ct.byref(length)), "dimension")
        return name.value.decode(), length.value

    def variables(self):
        """(name, [dim names], [dim lengths], nc_type) per variable, in varid order."""
        n = self.ct.c_int()
        self.check(self.lib.nc_inq_nvars(self.ncid, self.ct.byref(n)), "variables")
        out = []
        for varid in range(n.value):
            name, xtype, ndims = self.ct.create_string_buffer(256), self.ct.c_int(), self.ct.c_int()
            dimids, natts = (self.ct.c_int * 16)(), self.ct.c_int()
            self.check(self.lib.nc_inq_var(self.ncid, varid, name, self.ct.byref(xtype), self.ct.byref(ndims), dimids,
                                           self.ct.byref(natts)), "variable")
            dims = [self.dim(dimids[i]) for i in range(ndims.value)]
            out.append((name.value.decode(), [d[0] for d in dims], [d[1] for d in dims], xtype.value, varid))
        return out

    def attribute(self, varid, name):
        value = self.ct.c_double()
        if self.lib.nc_get_att_double(self.ncid, varid, name.encode(), self.ct.byref(value)) != 0:
            return None
        return value.value

    def read(self, varid, shape, as_float):
        """The whole variable: float32 when its type converts exactly (float, short, byte), else float64."""
        a = np.empty(shape, np.float32 if as_float else np.float64)
        fn = self.lib.nc_get_var_float if as_float else self.lib.nc_get_var_double
        self.check(fn(self.ncid, varid, a.ctypes.data_as(self.ct.c_void_p)), f"variable {varid}")
        return torch.from_numpy(a)


class NetcdfBatches:
    """src/data/netcdf_dataset.cpp with the example's settings (all variables on (time, lat, lon), horizon 1,
    normalize): channels in the file's variable order, read as float32; per-channel mean and std over the whole
    file in float64 (Chan's pairwise update over 64 MB blocks of time steps), applied as x.sub_(float32 mean)
    .mul_(float32 1/std); sample t: x = data[t], y = data[t + horizon]."""

    @staticmethod
    def grid(path, time_dim="time", lat_dim="lat", lon_dim="lon"):
        """(lat, lon, grid variables, the open file): what the model is built from, without reading values."""
        nc = NetcdfFile(path)
        variables = nc.variables()
        grid = [v for v in variables if sorted(v[1]) == sorted([time_dim, lat_dim, lon_dim])]
        coords = {v[0]: v for v in variables if len(v[1]) == 1}
        lat = nc.read(coords[lat_dim][4], coords[lat_dim][2], False).tolist()
        lon = nc.read(coords[lon_dim][4], coords[lon_dim][2], False).tolist()
        return lat, lon, grid, nc

    def __init__(self, path, batch_size, horizon=1, normalize=True, time_dim="time", lat_dim="lat", lon_dim="lon"):
        self.lat, self.lon, grid, nc = self.grid(path, time_dim, lat_dim, lon_dim)
        self.channels = [v[0] for v in grid]
        blocks = []
        for name, dims, lens, xtype, varid in grid:
            raw = nc.read(varid, lens, xtype in (1, 3, 5, 7, 8))  # NC_BYTE, NC_SHORT, NC_FLOAT, NC_UBYTE, NC_USHORT
            raw = raw.permute(dims.index(time_dim), dims.index(lat_dim), dims.index(lon_dim)).unsqueeze(1)
            scale, offset = nc.attribute(varid, "scale_factor"), nc.attribute(varid, "add_offset")
            if (scale or 1.0) != 1.0 or (offset or 0.0) != 0.0:
                raw = raw.to(torch.float64) * (scale or 1.0) + (offset or 0.0)
            blocks.append(raw.to(torch.float32).contiguous())
        nc.lib.nc_close(nc.ncid)
        data = torch.cat(blocks, 1)  # [time, channels, lat, lon]
        if normalize:  # one channel per variable here (no level dimension)
            n_time, _, n_lat, n_lon = data.shape
            steps = max(1, (64 << 20) // (n_lat * n_lon * 8))
            means, inv = [], []
            for block in blocks:
                count = mean = m2 = 0.0
                for t0 in range(0, n_time, steps):
                    x = block[t0:t0 + steps].select(1, 0).to(torch.float64)
                    n = float(x.numel())
                    m = x.mean().item()
                    m2_block = (x - m).square().sum().item()
                    total, delta = count + n, m - mean
                    mean += delta * n / total
                    m2 += m2_block + delta * delta * count * n / total
                    count = total
                std = math.sqrt(m2 / count) if count > 0 else 0.0
                means.append(mean)
                inv.append(1.0 / std if std > 0 else 1.0)
            data.sub_(torch.tensor(means, dtype=torch.float32).view(1, -1, 1, 1))
            data.mul_(torch.tensor(inv, dtype=torch.float32).view(1, -1, 1, 1))
        self.data, self.horizon, self.batch_size = data, horizon, batch_size
        self.n = data.size(0) - horizon
        self.per_epoch = (self.n + batch_size - 1) // batch_size

    def prepare(self, plan):
        pass

    def batch(self, epoch, k):
        a, b = k * self.batch_size, min((k + 1) * self.batch_size, self.n)
        return [self.data[a:b], self.data[a + self.horizon:b + self.horizon]]


def _proto_fields(buf):
    """(field number, wire type, value) of a protobuf message: enough to read a SentencePiece .model file."""
    pos, out = 0, []

    def varint():
        nonlocal pos
        shift = value = 0
        while True:
            b = buf[pos]
            pos += 1
            value |= (b & 0x7F) << shift
            shift += 7
            if b < 0x80:
                return value

    while pos < len(buf):
        key = varint()
        field, wire = key >> 3, key & 7
        if wire == 0:
            out.append((field, wire, varint()))
        elif wire == 1:
            out.append((field, wire, buf[pos:pos + 8]))
            pos += 8
        elif wire == 2:
            n = varint()
            out.append((field, wire, buf[pos:pos + n]))
            pos += n
        elif wire == 5:
            out.append((field, wire, buf[pos:pos + 4]))
            pos += 4
        else:
            raise ValueError(f"protobuf wire type {wire} not handled")
    return out


class SentencePieceBpe:
    """Encoding with a SentencePiece model: the `sentencepiece` package when it is installed, else this reading of
    its BPE algorithm (bpe_model.cc): normalise (NFKC, extra whitespace removed, a "\u2581" prefix, spaces to
    "\u2581"), split into characters, then repeatedly merge the adjacent pair whose concatenation is a piece with the
    highest score (the leftmost on ties); pieces not in the vocabulary become <unk>, a run of them one <unk>. Enough for the example's
    vocabulary (bellows trains it: model_type bpe, pad 0, unk 1, [CLS] 2, [SEP] 3): on the example's 4,200 sentences
    (and a few with unknown characters and extra spaces) it gave the sentencepiece package's ids exactly."""

    def __init__(self, path):
        import struct
        with open(path, "rb") as f:
            raw = f.read()
        self.pieces, self.scores, self.types = [], [], []
        self.model_type, normalizer = 1, {}
        for field, wire, value in _proto_fields(raw):
            if field == 1 and wire == 2:
                piece, score, kind = "", 0.0, 1
                for f2, w2, v2 in _proto_fields(value):
                    if f2 == 1:
                        piece = v2.decode("utf-8")
                    elif f2 == 2:
                        score = struct.unpack("<f", v2)[0]
                    elif f2 == 3:
                        kind = v2
                self.pieces.append(piece)
                self.scores.append(score)
                self.types.append(kind)
            elif field == 2 and wire == 2:  # TrainerSpec; its field 3 is model_type (1 unigram, 2 bpe)
                self.model_type = dict((f2, v2) for f2, w2, v2 in _proto_fields(value) if w2 == 0).get(3, 1)
            elif field == 3 and wire == 2:
                normalizer = {f2: v2 for f2, w2, v2 in _proto_fields(value)}
        self.add_dummy_prefix = bool(normalizer.get(3, 1))
        self.remove_extra_whitespaces = bool(normalizer.get(4, 1))
        self.escape_whitespaces = bool(normalizer.get(5, 1))
        self.ids = {p: i for i, p in enumerate(self.pieces) if self.types[i] in (1, 4, 5)}  # normal, user, unused
        self.unk_id = self.types.index(2)
        self.sp = None
        try:
            import sentencepiece
            self.sp = sentencepiece.SentencePieceProcessor(model_file=path)
        except ImportError:
            if self.model_type != 2:
                raise RuntimeError(f"{path} is not a BPE model: install sentencepiece to encode with it")

    def piece_id(self, piece):
        return self.pieces.index(piece)

    def normalize(self, text):
        import unicodedata
        text = unicodedata.normalize("NFKC", text)
        if self.remove_extra_whitespaces:
            text = " ".join(t for t in text.split(" ") if t)
        if not text:
            return ""
        if self.add_dummy_prefix:
            text = " " + text
        return text.replace(" ", "\u2581") if self.escape_whitespaces else text

    def encode(self, text):
        if self.sp is not None:
            return self.sp.encode(text)
        import heapq
        symbols = list(self.normalize(text))
        if not symbols:
            return []
        prev = list(range(-1, len(symbols) - 1))
        nxt = list(range(1, len(symbols) + 1))
        nxt[-1] = -1
        heap = []

        def add(left, right):
            if left < 0 or right < 0:
                return
            piece = symbols[left] + symbols[right]
            i = self.ids.get(piece)
            if i is not None:
                heapq.heappush(heap, (-self.scores[i], left, right, piece))

        for k in range(1, len(symbols)):
            add(k - 1, k)
        while heap:
            _, left, right, piece = heapq.heappop(heap)
            if not symbols[left] or not symbols[right] or symbols[left] + symbols[right] != piece:
                continue  # stale: one side was merged since
            symbols[left], symbols[right] = piece, ""
            nxt[left] = nxt[right]
            if nxt[right] >= 0:
                prev[nxt[right]] = left
            add(prev[left], left)
            add(left, nxt[left])
        out = []
        for sym in symbols:
            if sym:
                i = self.ids.get(sym, self.unk_id)
                if not (i == self.unk_id and out and out[-1] == self.unk_id):  # a run of unknowns is one <unk>
                    out.append(i)
        return out


class TextPairBatches:
    """src/data/text_pairs.cpp: a TSV with a header (premise, hypothesis, label columns; no quoting), labels in
    the configured class order, each sentence encoded once; sample [CLS] a [SEP] b [SEP] with segments 0/1,
    longest-first truncation to max_len; a batch pads to its longest sample with the pad id, x_mask true at
    tokens. The vocabulary is the one bellows trained and cached beside the data (<file>.spm-bpe-512.model)."""

    def __init__(self, path, batch_size, tokenizer, labels=("entailment", "neutral", "contradiction"), max_len=128):
        self.tok = SentencePieceBpe(tokenizer)
        # tokenizer.cpp: the pad piece, else <unk>; [CLS] and [SEP] by piece
        self.pad_id = self.tok.pieces.index("<pad>") if "<pad>" in self.tok.pieces else self.tok.unk_id
        self.cls_id, self.sep_id = self.tok.piece_id("[CLS]"), self.tok.piece_id("[SEP]")
        self.vocab_size = len(self.tok.pieces)
        with open(path, encoding="utf-8", newline="") as f:
            lines = f.read().split("\n")
        rows, header = [], None
        for line in lines:
            if line.endswith("\r"):
                line = line[:-1]
            if header is None and line.startswith("\ufeff"):
                line = line[1:]
            if not line:
                continue
            if header is None:
                header = line.split("\t")
                ip, ih, il = header.index("premise"), header.index("hypothesis"), header.index("label")
                continue
            fields = line.split("\t")
            rows.append((fields[ip], fields[ih], labels.index(fields[il])))
        self.samples = []
        for a, b, y in rows:
            ta, tb = self.tok.encode(a), self.tok.encode(b)
            la, lb = self.truncate(len(ta), len(tb), max_len)
            ids = [self.cls_id] + ta[:la] + [self.sep_id] + tb[:lb] + [self.sep_id]
            seg = [0] * (la + 2) + [1] * (lb + 1)
            self.samples.append((ids, seg, y))
        self.n, self.batch_size = len(self.samples), batch_size
        self.per_epoch = (self.n + batch_size - 1) // batch_size
        self.cache = {}

    @staticmethod
    def truncate(a, b, max_len):
        budget = max(max_len - 3, 0)
        if a + b <= budget:
            return a, b
        half = budget // 2
        if a >= b and b <= half:
            return budget - b, b
        if b > a and a <= half:
            return a, budget - a
        return budget - half, half

    def prepare(self, plan):
        for epoch, k in plan:
            if k in self.cache:
                continue
            part = self.samples[k * self.batch_size:(k + 1) * self.batch_size]
            longest = max(len(ids) for ids, _, _ in part)
            x = torch.full((len(part), longest), self.pad_id, dtype=torch.long)
            seg = torch.zeros((len(part), longest), dtype=torch.long)
            lengths = torch.tensor([len(ids) for ids, _, _ in part], dtype=torch.long)
            for i, (ids, sg, _) in enumerate(part):
                x[i, :len(ids)] = torch.tensor(ids)
                seg[i, :len(sg)] = torch.tensor(sg)
            y = torch.tensor([lab for _, _, lab in part], dtype=torch.long)
            mask = torch.arange(longest).unsqueeze(0) < lengths.unsqueeze(1)
            self.cache[k] = [x, seg, mask, y]

    def batch(self, epoch, k):
        return self.cache[k]


# ----------------------------------------------------------------------------------------------------------------
# FLOPs per sample: matmul/conv FLOPs of one training step per sample = 3 x forward (backward = 2 x forward:
# input and weight gradients). A multiply-add counts 2.
# ----------------------------------------------------------------------------------------------------------------


def flops_mlp(in_f, hidden, out):
    # forward: sum over layers of 2 * fan_in * fan_out
    widths = [in_f, *hidden, out]
    return 3 * sum(2 * a * b for a, b in zip(widths[:-1], widths[1:]))


def flops_lstm(in_f, hidden, layers, steps, out):
    # forward per time step and layer: 2 * 4H * (input width + H) (gates from x and from h); head 2 * H * out
    per_step = sum(2 * 4 * hidden * ((in_f if l == 0 else hidden) + hidden) for l in range(layers))
    return 3 * (steps * per_step + 2 * hidden * out)


def flops_transformer(in_f, d, layers, ff, steps, out):
    # forward per token and layer: qkv 2*d*3d + out_proj 2*d*d + feed-forward 2*2*d*ff + attention scores and
    # weighted sum 2 * 2 * steps * d; plus the input projection 2 * in_f * d per token and the head 2 * d * out
    per_token_layer = 2 * d * 3 * d + 2 * d * d + 4 * d * ff + 4 * steps * d
    return 3 * (steps * (layers * per_token_layer + 2 * in_f * d) + 2 * d * out)


def flops_ddpm(context, out, hidden, layers, temb):
    # forward: context encoder 2*C*H + input 2*(O+E+H)*H + (layers-1) blocks 2*H*H + output 2*H*O
    return 3 * (2 * context * hidden + 2 * (out + temb + hidden) * hidden + (layers - 1) * 2 * hidden * hidden
                + 2 * hidden * out)


def flops_resnet(depth=18, num_classes=10, side=128, in_channels=3, base=64):
    # forward: every convolution 2 * k*k * C_in * C_out * H_out * W_out (the stem, both 3x3 convs of each block,
    # the 1x1 downsample convs) + fc 2 * C * classes; BatchNorm, ReLU, pooling and adds not counted
    stages = {18: [2, 2, 2, 2], 34: [3, 4, 6, 3]}[depth]
    out = lambda size, k, stride: (size + 2 * (k // 2) - k) // stride + 1  # noqa: E731
    size = out(side, 7, 2)
    total = 2 * 49 * in_channels * base * size * size
    size = (size + 2 - 3) // 2 + 1  # max pool 3x3/2, padding 1
    in_planes = base
    for s, n in enumerate(stages):
        planes = base << s
        for i in range(n):
            stride = 2 if (s > 0 and i == 0) else 1
            o = out(size, 3, stride)
            total += 2 * 9 * in_planes * planes * o * o + 2 * 9 * planes * planes * o * o
            if stride != 1 or in_planes != planes:
                total += 2 * in_planes * planes * o * o
            size, in_planes = o, planes
    return 3 * (total + 2 * in_planes * num_classes)


def flops_gnn(graph, in_channels, out_channels, latent, layers, mlp_layers=1):
    # forward: every Linear 2 * fan_in * fan_out per row it is applied to. n grid nodes, m mesh nodes, edges
    # e_g2m, e_mesh, e_m2g. An MLP(i -> o) = i -> L (-> L)^(mlp_layers-1) -> o. Embeddings: grid n x MLP(C+3 -> L),
    # mesh m x MLP(3 -> L), each edge set x MLP(4 -> L); an interaction (senders S, receivers R, edges E): the first
    # edge Linear split as E x (L -> L) + S x (L -> L) + R x (L -> L), the rest of the edge MLP on E, the node MLP
    # R x MLP(2L -> L); grid update n x MLP(L -> L); output n x MLP(L -> out). Graph per sample (batch of graphs).
    L = latent
    mlp = lambda i, o: 2 * (i * L + (mlp_layers - 1) * L * L + L * o)  # noqa: E731
    tail = 2 * ((mlp_layers - 1) * L * L + L * L)  # an edge MLP after its first Linear
    n, m = graph["n_lat"] * graph["n_lon"], graph["mesh_nodes"]
    e_g2m, e_mesh, e_m2g = (graph[k][0].numel() for k in ("g2m", "mesh", "m2g"))
    inter = lambda s, r, e: e * 2 * L * L + s * 2 * L * L + r * 2 * L * L + e * tail + r * mlp(2 * L, L)  # noqa: E731
    fwd = (n * mlp(in_channels + 3, L) + m * mlp(3, L) + (e_g2m + e_mesh + e_m2g) * mlp(4, L)
           + inter(n, m, e_g2m) + n * mlp(L, L) + layers * inter(m, m, e_mesh) + inter(m, n, e_m2g)
           + n * mlp(L, out_channels))
    return 3 * fwd


def flops_text_pair(tokens, d=256, layers=4, ff=1024, num_classes=3, frozen=True):
    # forward of one sample padded to `tokens` positions: per position and layer qkv 2*d*3d + out_proj 2*d*d +
    # feed-forward 2*2*d*ff + attention 2*2*tokens*d; the head 2*d*classes. A frozen encoder runs forward only
    # (1x, no backward), the head trains (3x); unfrozen, everything is 3x. Embedding lookups not counted.
    encoder = tokens * layers * (2 * d * 3 * d + 2 * d * d + 4 * d * ff + 4 * tokens * d)
    return (1 if frozen else 3) * encoder + 3 * 2 * d * num_classes


# ----------------------------------------------------------------------------------------------------------------
# Workloads: the example configs' sizes and optimizer settings (examples/*/*.yaml; seed 0 everywhere).
# ----------------------------------------------------------------------------------------------------------------


class Workload:
    def __init__(self, name, config, kind, batch_size, lr, weight_decay, build, load, flops, seed=0,
                 betas=(0.9, 0.999), eps=1e-8, clip_max_norm=0.0, bellows_overrides=(), accumulation=1,
                 channels_last=False):
        # bellows_overrides: key=value args that make bellows' run the one this peer runs (beyond those every
        # side-by-side run passes: see check.py)
        self.bellows_overrides = list(bellows_overrides)
        self.name, self.config, self.kind, self.batch_size = name, config, kind, batch_size
        self.lr, self.weight_decay, self.betas, self.eps = lr, weight_decay, betas, eps
        self.build, self.load, self.flops, self.seed, self.clip_max_norm = build, load, flops, seed, clip_max_norm
        self.accumulation, self.channels_last = accumulation, channels_last


def _w4_load(path, batch_size, batches_needed):
    return ImageFolderBatches(path, batch_size, seed=0, hflip=True, channels_last=True)


def _w6_build(path):
    lat, lon, grid, nc = NetcdfBatches.grid(path)
    nc.lib.nc_close(nc.ncid)
    return Gnn(lat, lon, len(grid), len(grid), latent=128, layers=6, mlp_layers=1, stride=4, levels=2)


def _w6_load(path, batch_size, batches_needed):
    return NetcdfBatches(path, batch_size, horizon=1, normalize=True)


W7_OPTIONS = {"frozen": True, "tokenizer": None}  # --unfreeze-encoder, --tokenizer


def _w7_tokenizer(path):
    return W7_OPTIONS["tokenizer"] or f"{path}.spm-bpe-512.model"  # what bellows caches beside the data


def _w7_build(path):
    tok = SentencePieceBpe(_w7_tokenizer(path))
    pad = tok.pieces.index("<pad>") if "<pad>" in tok.pieces else tok.unk_id
    return TextPairClassifier(len(tok.pieces), pad, 3, 256, 4, 4, 1024, 0.1, 128, freeze_encoder=W7_OPTIONS["frozen"])


def _w7_load(path, batch_size, batches_needed):
    return TextPairBatches(path, batch_size, _w7_tokenizer(path))


def _w1_load(path, batch_size, batches_needed):
    return RowBatches(list(read_csv(path)), batch_size)


def _w2_load(path, batch_size, batches_needed):
    return WindowBatches(read_series(path), 64, 1, 4, [0, 1, 2, 3], batch_size, batches_needed)


def _w3_load(path, batch_size, batches_needed):
    return WindowBatches(read_series(path), 128, 1, 4, [0, 1, 2, 3], batch_size, batches_needed)


def _w5_load(path, batch_size, batches_needed):
    return RowBatches(read_npz(path, "context", "fine"), batch_size)


WORKLOADS = {
    "W1": Workload("tabular-mlp", "examples/temporal/mlp.yaml", "regression", 512, 1e-3, 0.01,
                   lambda path: Mlp(64, (512, 512, 512), 1), _w1_load, flops_mlp(64, (512, 512, 512), 1)),
    "W2": Workload("temporal-lstm", "examples/temporal/lstm.yaml", "regression", 256, 2e-3, 0.01,
                   lambda path: Lstm(16, 128, 2, 16), _w2_load, flops_lstm(16, 128, 2, 64, 16)),
    "W3": Workload("temporal-transformer", "examples/temporal/transformer.yaml", "regression", 32, 3e-4, 0.01,
                   lambda path: SequenceTransformer(16, 256, 4, 4, 1024, 0.1, 128, 16), _w3_load,
                   flops_transformer(16, 256, 4, 1024, 128, 16)),
    "W5": Workload("icon-diffusion", "examples/icon-diffusion/config.yaml", "ddpm", 256, 2e-3, 0.0,
                   lambda path: Ddpm(7, 256, 256, 2, 32, 50), _w5_load, flops_ddpm(7, 256, 256, 2, 32),
                   bellows_overrides=["ema.enabled=false"]),  # the peer keeps no EMA of the weights
    # examples/cape-resnet/config.yaml: 2 micro-batches of 32 per optimizer step, clipping at norm 1, channels_last,
    # random horizontal flips; its data.val_path is relative to the example's working directory: dropped here.
    "W4": Workload("cape-resnet", "examples/cape-resnet/config.yaml", "classification", 32, 2e-3, 0.05,
                   lambda path: ResNet(18, 10), _w4_load, lambda data: flops_resnet(18, 10, data.images.size(-1)), clip_max_norm=1.0, accumulation=2,
                   channels_last=True, bellows_overrides=['data.val_path=""']),
    # examples/weather-gnn/config.yaml: one graph per step, clipping at norm 1; the FLOPs depend on the grid
    "W6": Workload("weather-gnn", "examples/weather-gnn/config.yaml", "regression", 1, 1e-3, 0.0, _w6_build,
                   _w6_load, None, clip_max_norm=1.0),
    # examples/nli-encoder/config.yaml: a frozen encoder (no encoder_weights here: the init file has them all), the
    # head trains; the FLOPs depend on the batches' padded lengths
    "W7": Workload("nli-encoder", "examples/nli-encoder/config.yaml", "text_pair", 32, 2e-3, 0.01, _w7_build,
                   _w7_load, None),
}


# Host-bound twins (issue 43): W1, W3, W4 and W5 shrunk until a step costs mostly host time (launch and dispatch),
# with the overrides that make `bellows train` on the same example config build the identical model (same
# state_dict names and shapes: one init file loads in both) on the same batches. bench/peers/host_twins.py times
# them on one thread; check.py --twin checks their losses.
def _w3_twin_load(path, batch_size, batches_needed):
    return WindowBatches(read_series(path), 8, 1, 4, [0, 1, 2, 3], batch_size, batches_needed)


# Center crop of the (--quick: 64x64) images: the stem gives 12x12, the max pool 6x6, layer2 3x3, layer3 2x2, layer4
# 1x1. The model accepts smaller ones, but at 16x16 (4x4 after the pool) the fp32 losses part from step 2 (1.1e-5 at
# batch 2, 0.13 by step 10 at batch 4: some kernel differs at those sizes); at 24, 32, 48 and 64 they agree bitwise.
W4_TWIN_CROP = 24


def _w4_twin_load(path, batch_size, batches_needed):
    return ImageFolderBatches(path, batch_size, seed=0, hflip=True, channels_last=True,
                              crop=(W4_TWIN_CROP, W4_TWIN_CROP))


TWINS = {
    # MLP 64 -> 16 -> 16 -> 1, batch 4
    "W1": Workload("tabular-mlp-twin", "examples/temporal/mlp.yaml", "regression", 4, 1e-3, 0.01,
                   lambda path: Mlp(64, (16, 16), 1), _w1_load, flops_mlp(64, (16, 16), 1),
                   bellows_overrides=["model.hidden=[16,16]", "data.batch_size=4"]),
    # issue 43's: d_model 16, 2 heads, 2 layers, ff 32, windows of 8 (max_len 8), batch 4; dropout 0.1 kept
    "W3": Workload("temporal-transformer-twin", "examples/temporal/transformer.yaml", "regression", 4, 3e-4, 0.01,
                   lambda path: SequenceTransformer(16, 16, 2, 2, 32, 0.1, 8, 16), _w3_twin_load,
                   flops_transformer(16, 16, 2, 32, 8, 16),
                   bellows_overrides=["model.d_model=16", "model.heads=2", "model.layers=2", "model.ff=32",
                                      "model.max_len=8", "data.window.length=8", "data.batch_size=4"]),
    # DDPM with hidden 16 (time embedding 32, 2 layers, T = 50 as W5), batch 4
    "W5": Workload("icon-diffusion-twin", "examples/icon-diffusion/config.yaml", "ddpm", 4, 2e-3, 0.0,
                   lambda path: Ddpm(7, 256, 16, 2, 32, 50), _w5_load, flops_ddpm(7, 256, 16, 2, 32),
                   bellows_overrides=["ema.enabled=false", "model.hidden=16", "data.batch_size=4"]),
    # ResNet-18 at the narrowest width bellows allows (model.width 0.125: 8 channels in the first stage, 64 in the
    # last), 24x24 center crops, micro-batches of 2; the example's accumulation 2, clipping 1 and channels_last
    "W4": Workload("cape-resnet-twin", "examples/cape-resnet/config.yaml", "classification", 2, 2e-3, 0.05,
                   lambda path: ResNet(18, 10, 3, 8), _w4_twin_load,
                   lambda data: flops_resnet(18, 10, data.images.size(-1), 3, 8), clip_max_norm=1.0, accumulation=2,
                   channels_last=True,
                   bellows_overrides=['data.val_path=""', "model.width=0.125", "data.batch_size=2",
                                      f"data.images.crop=[{W4_TWIN_CROP},{W4_TWIN_CROP}]",
                                      "data.images.random_crop=false"]),
}


# ----------------------------------------------------------------------------------------------------------------
# The run
# ----------------------------------------------------------------------------------------------------------------


def make_optimizer(model, w, lr):
    """AdamW on the fused kernel; no decay on tensors of <= 1 dimension and on names containing NO_DECAY. Returns
    the optimizer and the parameters in bellows' order (the decay group, then the rest), the order its gradient
    norm is summed in."""
    decay, plain = [], []
    for name, p in model.named_parameters():
        if not p.requires_grad:
            continue
        (plain if p.dim() <= 1 or any(s in name for s in NO_DECAY) else decay).append(p)
    groups = [g for g in ({"params": decay, "weight_decay": w.weight_decay}, {"params": plain, "weight_decay": 0.0})
              if g["params"]]
    return torch.optim.AdamW(groups, lr=lr, betas=w.betas, eps=w.eps, fused=True), decay + plain


def step_plan(steps, per_epoch, accumulation):
    """(epoch, [batch indices]) per optimizer step, as Trainer::fit takes them: k micro-batches per step, fewer for
    the last step of an epoch (src/train/trainer.cpp: batches = min(k, remaining_in_epoch))."""
    plan, epoch = [], 0
    while len(plan) < steps:
        for first in range(0, per_epoch, accumulation):
            plan.append((epoch, list(range(first, min(first + accumulation, per_epoch)))))
            if len(plan) == steps:
                break
        epoch += 1
    return plan


def clip_grad_norm(params, max_norm):
    """torch.nn.utils.clip_grad_norm_ (foreach): the arithmetic of bellows' EagerStep::clip_gradients, which keeps
    the norm on the device (src/train/eager_step.cpp: linalg_vector_norm of the stacked per-tensor norms, then every
    gradient times min(max_norm / (norm + 1e-6), 1)). `params` in bellows' order, which the norm's sum follows."""
    return torch.nn.utils.clip_grad_norm_(params, max_norm, foreach=True)


def main(argv=None):
    ap = argparse.ArgumentParser(description="PyTorch peer of bellows' workloads W1..W7 (see the file's header)")
    ap.add_argument("--workload", required=True, choices=sorted(WORKLOADS))
    ap.add_argument("--data", required=True, help="the example's data file (or folder)")
    ap.add_argument("--write-init", metavar="FILE", help="save the seeded initial state_dict as safetensors and exit")
    ap.add_argument("--write-script", metavar="FILE", help="W1/W3: save the model as TorchScript (script; W3: trace) and exit")
    ap.add_argument("--init", metavar="FILE", help="start from these weights (safetensors, strict)")
    ap.add_argument("--steps", type=int, default=20, help="timed optimizer steps")
    ap.add_argument("--warmup", type=int, default=0, help="untimed optimizer steps before the timed ones")
    ap.add_argument("--mode", choices=MODES, default="eager",
                    help="eager; compile (torch.compile's default mode); reduce-overhead, max-autotune-no-cudagraphs "
                         "(torch.compile(mode=...))")
    ap.add_argument("--twin", action="store_true", help="the workload's host-bound twin (TWINS: W1, W3, W4, W5)")
    ap.add_argument("--cold-compile", action="store_true",
                    help="compile without inductor's on-disk caches (else a second run reuses the first's kernels)")
    ap.add_argument("--precision", choices=("fp32", "bf16-mixed"), default="fp32")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--batch-size", type=int, default=0, help="default: the workload's")
    ap.add_argument("--lr", type=float, default=0.0, help="default: the workload's")
    ap.add_argument("--seed", type=int, default=None, help="default: the workload's config seed (0)")
    ap.add_argument("--cpp-linear", action="store_true",
                    help="LibTorch's torch::nn::Linear forward (matmul + bias for 3-D inputs), as bellows' models used "
                         "before commit ed3a21b")
    ap.add_argument("--unfreeze-encoder", action="store_true", help="W7: train the encoder too (bellows: "
                    "model.freeze_encoder=false)")
    ap.add_argument("--tokenizer", help="W7: SentencePiece .model (default: DATA.spm-bpe-512.model, bellows' cache)")
    ap.add_argument("--device", default="cpu", help="cpu, cuda or cuda:N (scripts/gpu_check.sh runs the peers on a GPU)")
    ap.add_argument("--json", metavar="OUT", help="write the results here")
    ap.add_argument("--backends", choices=("bellows", "torch"), default="bellows",
                    help="CUDA library settings: bellows (what its plan sets for the precision: cuDNN benchmark on, TF32 off "
                         "under fp32; like with like) or torch (PyTorch's defaults: benchmark off, cuDNN TF32 on)")
    args = ap.parse_args(argv)
    device = torch.device(args.device)
    if device.type == "cuda" and args.backends == "bellows":
        # bellows' plan: cudnn_benchmark auto is on for CUDA (src/plan/plan.cpp); the fp32 policy turns TF32 off in
        # cuBLAS and cuDNN, bf16-mixed leaves both as PyTorch has them (src/precision/policies/).
        torch.backends.cudnn.benchmark = True
        if args.precision == "fp32":
            torch.backends.cudnn.allow_tf32 = False
            torch.backends.cuda.matmul.allow_tf32 = False

    if args.twin and args.workload not in TWINS:
        ap.error(f"--twin: {args.workload} has no host-bound twin ({', '.join(sorted(TWINS))})")
    w = (TWINS if args.twin else WORKLOADS)[args.workload]
    if args.cpp_linear:
        LINEAR["cls"] = CppLinear
    W7_OPTIONS.update(frozen=not args.unfreeze_encoder, tokenizer=args.tokenizer)
    torch.set_num_threads(args.threads)
    batch_size = args.batch_size or w.batch_size
    lr = args.lr or w.lr
    seed = w.seed if args.seed is None else args.seed

    # --- the model, built right after seeding as bellows does (src/app/run.cpp: manual_seed, data, model) ---
    torch.manual_seed(seed)
    model = w.build(args.data)
    if args.write_script:  # the same module for bellows' model.name: torchscript (bench/peers/run.py --scripted)
        if args.workload == "W1":
            scripted = torch.jit.script(model)
        elif args.workload == "W3":  # not scriptable as written (its optional mask and tensor attribute): traced
            scripted = torch.jit.trace(model, (torch.randn(2, 128, 16),), check_trace=False)
        else:
            sys.exit(f"--write-script: {args.workload} has no scripted form here (W1, W3)")
        scripted.save(args.write_script)
        print(f"{args.workload}: wrote {args.write_script}")
        return 0
    if args.write_init:
        save_file({k: v.contiguous() for k, v in model.state_dict().items()}, args.write_init)
        print(f"{args.workload}: wrote {len(model.state_dict())} tensors to {args.write_init}")
        return 0
    if args.init:
        state = load_file(args.init)
        missing, unexpected = model.load_state_dict(state, strict=True)  # raises on a mismatch
    model.train()
    model.to(device)
    for m in model.modules():  # the sinusoidal table is no buffer (not in the state_dict): moved once, as bellows does
        if getattr(m, "sinusoid", None) is not None:
            m.sinusoid = m.sinusoid.to(device)

    if w.channels_last:
        model = model.to(memory_format=torch.channels_last)

    total = args.warmup + args.steps
    data = w.load(args.data, batch_size, total * w.accumulation)
    plan = step_plan(total, data.per_epoch, w.accumulation)
    data.prepare([(epoch, k) for epoch, ks in plan for k in ks])
    objective = Objective(model, w.kind)
    if args.mode == "eager":
        step_fn = objective
    elif args.mode == "compile":
        step_fn = torch.compile(objective)
    else:
        step_fn = torch.compile(objective, mode=args.mode)
    # reduce-overhead on CUDA: CUDA graph trees; each forward starts a new generation (the previous step's outputs,
    # the loss, have been read or copied by then). On a CPU the mode compiles without graphs.
    mark_step = args.mode == "reduce-overhead"
    optimizer, params = make_optimizer(model, w, lr)
    bf16 = args.precision == "bf16-mixed"

    def train_step(epoch, batches):
        loss_sum, samples = None, 0
        for k in batches:
            tensors = data.batch(epoch, k)
            if device.type != "cpu":
                tensors = tuple(t.to(device, non_blocking=True) if torch.is_tensor(t) else t for t in tensors)
            if w.kind == "ddpm":  # DdpmTask::step's draws, in its order, on the global generator, outside autocast
                context, x0 = tensors
                t = torch.randint(0, model.steps, (x0.size(0),), dtype=torch.long, device=x0.device)
                noise = torch.randn_like(x0)
                tensors = (x0, context, t, noise)
            if mark_step:
                torch.compiler.cudagraph_mark_step_begin()
            with torch.autocast(device.type, dtype=torch.bfloat16, enabled=bf16):
                loss = step_fn(*tensors)
            (loss / float(len(batches)) if len(batches) > 1 else loss).backward()
            loss = loss.detach().to(torch.float32)
            loss_sum = loss.clone() if loss_sum is None else loss_sum + loss
            samples += tensors[0].size(0)
        if w.clip_max_norm > 0:
            clip_grad_norm(params, w.clip_max_norm)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        return loss_sum.item() / len(batches), samples  # the step's record: the mean of its micro-batch losses

    losses, times, samples, all_times = [], [], [], []
    first_step_s = startup_s = None
    for k, (epoch, batches) in enumerate(plan):
        t0 = time.perf_counter()
        loss, n = train_step(epoch, batches)
        dt = time.perf_counter() - t0
        if k == 0:
            first_step_s = dt
            startup_s = time.time() - process_start_wall()
        losses.append(loss)
        all_times.append(dt)
        if k >= args.warmup:
            times.append(dt)
            samples.append(n)

    timed_s = sum(times)
    # Compilation (and, under reduce-overhead on CUDA, the graphs' warm-up and capture, which take the first two or
    # three calls) happens in the first steps: compile_s is what the warm-up steps (the first step when --warmup is
    # 0) took beyond as many steady-state steps (the median timed step), for every compiled mode; None for eager.
    warm = all_times[:max(args.warmup, 1)]
    steady = statistics.median(times) if times else 0.0
    compile_s = max(0.0, sum(warm) - len(warm) * steady) if args.mode != "eager" and warm else None
    if args.workload == "W6":
        flops = flops_gnn(model.graph, model.in_channels, model.out_channels, model.latent, len(model.processor))
    elif args.workload == "W7":  # the mean over the timed steps' samples, each at its batch's padded length
        per = [(data.batch(e, k)[0].size(1), data.batch(e, k)[0].size(0)) for e, ks in plan[args.warmup:] for k in ks]
        flops = (sum(flops_text_pair(t, frozen=model.frozen()) * n for t, n in per) / max(1, sum(n for _, n in per)))
    else:
        flops = w.flops(data) if callable(w.flops) else w.flops
    result = {
        "workload": args.workload, "name": w.name, "system": f"pytorch-{args.mode}", "mode": args.mode,
        "twin": args.twin, "compiled": args.mode != "eager",
        "cudagraphs": args.mode == "reduce-overhead" and device.type == "cuda",
        "precision": args.precision, "threads": args.threads, "device": str(device), "cpp_linear": args.cpp_linear,
        "backends": args.backends, "cudnn_benchmark": torch.backends.cudnn.benchmark,
        "cudnn_allow_tf32": torch.backends.cudnn.allow_tf32,
        "batch_size": batch_size, "accumulation": w.accumulation, "lr": lr,
        "steps": args.steps, "warmup": args.warmup, "losses": losses,
        "samples_per_s": sum(samples) / timed_s if timed_s > 0 else None,
        "step_ms": 1000 * statistics.median(times) if times else None,
        "step_ms_all": [1000 * t for t in times],
        "first_step_s": first_step_s, "startup_s": startup_s, "import_s": _IMPORT_S,
        "warmup_s": sum(all_times[:args.warmup]), "compile_s": compile_s,
        "flops_per_sample": flops, "torch": torch.__version__, "data": os.path.abspath(args.data),
    }
    if args.json:
        with open(args.json, "w") as f:
            json.dump(result, f, indent=1)
    print(f"{args.workload} {args.mode} {args.precision}: {len(losses)} steps, loss {losses[0]:.6g} -> {losses[-1]:.6g}, "
          f"{result['samples_per_s'] or 0:.1f} samples/s, median step {result['step_ms'] or 0:.2f} ms, "
          f"first step {first_step_s:.3f} s, startup {startup_s:.2f} s"
          + (f", compile {compile_s:.2f} s" if compile_s is not None else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
