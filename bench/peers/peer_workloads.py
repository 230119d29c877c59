# The PyTorch peer's workloads (bench/peers/peer.py): W1..W7 and their host-bound twins, each a model, its data and
# the optimizer settings of its example config, with its analytic FLOPs per sample. check.py, run.py, host_twins.py
# and bench/dist read WORKLOADS and TWINS through peer.py.
from peer_data import ImageFolderBatches, NetcdfBatches, RowBatches, WindowBatches, read_csv, read_npz, read_series
from peer_gnn import Gnn
from peer_models import Ddpm, Lstm, Mlp, ResNet, SequenceTransformer, TextPairClassifier
from peer_text import SentencePieceBpe, TextPairBatches


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
