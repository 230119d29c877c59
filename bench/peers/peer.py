# The PyTorch (Python) peer of bellows' reference workloads W1..W7 (/work/shared/WORKLOADS.md): the same model
# (state_dict names and shapes equal to bellows' LibTorch module tree, so one safetensors file starts both),
# the same batches in the same order as `bellows train ... data.shuffle=false data.val_fraction=0`, the same
# loss, AdamW on PyTorch's fused kernel with bellows' weight-decay grouping, and a constant learning rate.
#   peer.py --workload W1 --data features.csv --write-init init.safetensors      (seeded init, then exit)
#   peer.py --workload W1 --data features.csv --init init.safetensors --steps 50 --warmup 5 \
#           --mode eager|compile --precision fp32|bf16-mixed --threads 2 --json out.json
# Random draws (W3's dropout, W5's timesteps and noise) come from the global CPU generator seeded with the run's
# seed (0) before the model is built, in the order bellows draws them (src/app/run.cpp, src/models/ddpm.cpp), so
# eager runs give bellows' losses step for step. bench/peers/check.py compares the two.
import time

_T_SCRIPT = time.perf_counter()  # the script's first line; startup_s counts from the process start (below)
_WALL_SCRIPT = time.time()

import argparse  # noqa: E402
import json  # noqa: E402
import math  # noqa: E402
import os  # noqa: E402
import statistics  # noqa: E402
import sys  # noqa: E402

import numpy as np  # noqa: E402
import torch  # noqa: E402
import torch.nn as nn  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from safetensors.torch import load_file, save_file  # noqa: E402

_IMPORT_S = time.perf_counter() - _T_SCRIPT

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
    """torch::nn::Linear's forward in LibTorch (torch/csrc/api/include/torch/nn/functional/linear.h): addmm for 2-D
    inputs like at::linear, but for 3-D inputs matmul and then `output += bias`, not at::linear's fused addmm. In
    fp32 the two agree bitwise; under bf16 autocast the C++ form rounds the product to bf16 and adds the fp32 bias
    (another rounding, and an fp32 copy of the output), where at::linear adds a bf16 bias inside the gemm. With
    --cpp-linear the peer uses this form wherever bellows' models use torch::nn::Linear, and bf16 losses agree
    bitwise; without it the peer is idiomatic PyTorch (nn.Linear) and W3's bf16 losses differ by ~1e-3."""

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

    def forward(self, x, attend=None):
        steps = x.size(1)
        h = x
        if self.sinusoid is not None:
            h = h + self.sinusoid[:steps].to(x.dtype)
        if self.pos_embedding is not None:
            h = h + self.pos_embedding[:steps].to(x.dtype)
        h = self.dropout(h)
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
        k = torch.arange(half, dtype=torch.float32)
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

    def batch(self, k):
        k %= self.per_epoch
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

    def batch(self, k):
        return self.batches[k % self.per_epoch]


def read_npz(path, x_name, y_name):
    z = np.load(path)
    return [torch.from_numpy(np.ascontiguousarray(z[n].astype(np.float32) if z[n].dtype.kind == "f" else z[n]))
            for n in (x_name, y_name)]


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


# ----------------------------------------------------------------------------------------------------------------
# Workloads: the example configs' sizes and optimizer settings (examples/*/*.yaml; seed 0 everywhere).
# ----------------------------------------------------------------------------------------------------------------


class Workload:
    def __init__(self, name, config, kind, batch_size, lr, weight_decay, build, load, flops, seed=0,
                 betas=(0.9, 0.999), eps=1e-8, clip_max_norm=0.0, bellows_overrides=()):
        # bellows_overrides: key=value args that make bellows' run the one this peer runs (beyond those every
        # side-by-side run passes: see check.py)
        self.bellows_overrides = list(bellows_overrides)
        self.name, self.config, self.kind, self.batch_size = name, config, kind, batch_size
        self.lr, self.weight_decay, self.betas, self.eps = lr, weight_decay, betas, eps
        self.build, self.load, self.flops, self.seed, self.clip_max_norm = build, load, flops, seed, clip_max_norm


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
                   lambda: Mlp(64, (512, 512, 512), 1), _w1_load, flops_mlp(64, (512, 512, 512), 1)),
    "W2": Workload("temporal-lstm", "examples/temporal/lstm.yaml", "regression", 256, 2e-3, 0.01,
                   lambda: Lstm(16, 128, 2, 16), _w2_load, flops_lstm(16, 128, 2, 64, 16)),
    "W3": Workload("temporal-transformer", "examples/temporal/transformer.yaml", "regression", 32, 3e-4, 0.01,
                   lambda: SequenceTransformer(16, 256, 4, 4, 1024, 0.1, 128, 16), _w3_load,
                   flops_transformer(16, 256, 4, 1024, 128, 16)),
    "W5": Workload("icon-diffusion", "examples/icon-diffusion/config.yaml", "ddpm", 256, 2e-3, 0.0,
                   lambda: Ddpm(7, 256, 256, 2, 32, 50), _w5_load, flops_ddpm(7, 256, 256, 2, 32),
                   bellows_overrides=["ema.enabled=false"]),  # the peer keeps no EMA of the weights
}


# ----------------------------------------------------------------------------------------------------------------
# The run
# ----------------------------------------------------------------------------------------------------------------


def make_optimizer(model, w, lr):
    """AdamW on the fused kernel; no decay on tensors of <= 1 dimension and on names containing NO_DECAY."""
    decay, plain = [], []
    for name, p in model.named_parameters():
        if not p.requires_grad:
            continue
        (plain if p.dim() <= 1 or any(s in name for s in NO_DECAY) else decay).append(p)
    groups = [g for g in ({"params": decay, "weight_decay": w.weight_decay}, {"params": plain, "weight_decay": 0.0})
              if g["params"]]
    return torch.optim.AdamW(groups, lr=lr, betas=w.betas, eps=w.eps, fused=True)


def clip_grad_norm(params, max_norm):
    """src/train/trainer.cpp clip_gradients: total 2-norm of the per-tensor norms; scaled only when above max."""
    grads = [p.grad for p in params if p.grad is not None]
    norms = torch._foreach_norm(grads, 2)
    total = torch.stack(norms).to(torch.float32).norm(2).item()
    if max_norm > 0 and math.isfinite(total) and total > max_norm:
        torch._foreach_mul_(grads, max_norm / (total + 1e-6))
    return total


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--workload", required=True, choices=sorted(WORKLOADS))
    ap.add_argument("--data", required=True, help="the example's data file (or folder)")
    ap.add_argument("--write-init", metavar="FILE", help="save the seeded initial state_dict as safetensors and exit")
    ap.add_argument("--init", metavar="FILE", help="start from these weights (safetensors, strict)")
    ap.add_argument("--steps", type=int, default=20, help="timed optimizer steps")
    ap.add_argument("--warmup", type=int, default=0, help="untimed optimizer steps before the timed ones")
    ap.add_argument("--mode", choices=("eager", "compile"), default="eager")
    ap.add_argument("--precision", choices=("fp32", "bf16-mixed"), default="fp32")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--batch-size", type=int, default=0, help="default: the workload's")
    ap.add_argument("--lr", type=float, default=0.0, help="default: the workload's")
    ap.add_argument("--seed", type=int, default=None, help="default: the workload's config seed (0)")
    ap.add_argument("--cpp-linear", action="store_true",
                    help="LibTorch's torch::nn::Linear forward (matmul + bias for 3-D inputs) as in bellows' models")
    ap.add_argument("--json", metavar="OUT", help="write the results here")
    args = ap.parse_args(argv)

    w = WORKLOADS[args.workload]
    if args.cpp_linear:
        LINEAR["cls"] = CppLinear
    torch.set_num_threads(args.threads)
    batch_size = args.batch_size or w.batch_size
    lr = args.lr or w.lr
    seed = w.seed if args.seed is None else args.seed

    # --- the model, built right after seeding as bellows does (src/app/run.cpp: manual_seed, data, model) ---
    torch.manual_seed(seed)
    model = w.build()
    if args.write_init:
        save_file({k: v.contiguous() for k, v in model.state_dict().items()}, args.write_init)
        print(f"{args.workload}: wrote {len(model.state_dict())} tensors to {args.write_init}")
        return 0
    if args.init:
        state = load_file(args.init)
        missing, unexpected = model.load_state_dict(state, strict=True)  # raises on a mismatch
    model.train()

    total = args.warmup + args.steps
    data = w.load(args.data, batch_size, total)
    objective = Objective(model, w.kind)
    step_fn = torch.compile(objective) if args.mode == "compile" else objective
    optimizer = make_optimizer(model, w, lr)
    params = [p for p in model.parameters() if p.requires_grad]
    bf16 = args.precision == "bf16-mixed"

    def train_step(k):
        tensors = data.batch(k)
        if w.kind == "ddpm":  # DdpmTask::step's draws, in its order, on the global generator, outside autocast
            x0, context = tensors[1], tensors[0]
            t = torch.randint(0, model.steps, (x0.size(0),), dtype=torch.long)
            noise = torch.randn_like(x0)
            tensors = (x0, context, t, noise)
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
            loss = step_fn(*tensors)
        loss.backward()
        if w.clip_max_norm > 0:
            clip_grad_norm(params, w.clip_max_norm)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        return loss.detach().to(torch.float32).item(), tensors[0].size(0)

    losses, times, samples = [], [], []
    first_step_s = startup_s = None
    for k in range(total):
        t0 = time.perf_counter()
        loss, n = train_step(k)
        dt = time.perf_counter() - t0
        if k == 0:
            first_step_s = dt
            startup_s = time.time() - process_start_wall()
        losses.append(loss)
        if k >= args.warmup:
            times.append(dt)
            samples.append(n)

    timed_s = sum(times)
    result = {
        "workload": args.workload, "name": w.name, "system": f"pytorch-{args.mode}", "mode": args.mode,
        "precision": args.precision, "threads": args.threads, "cpp_linear": args.cpp_linear, "batch_size": batch_size, "lr": lr,
        "steps": args.steps, "warmup": args.warmup, "losses": losses,
        "samples_per_s": sum(samples) / timed_s if timed_s > 0 else None,
        "step_ms": 1000 * statistics.median(times) if times else None,
        "step_ms_all": [1000 * t for t in times],
        "first_step_s": first_step_s, "startup_s": startup_s, "import_s": _IMPORT_S,
        "flops_per_sample": w.flops, "torch": torch.__version__, "data": os.path.abspath(args.data),
    }
    if args.json:
        with open(args.json, "w") as f:
            json.dump(result, f, indent=1)
    print(f"{args.workload} {args.mode} {args.precision}: {len(losses)} steps, loss {losses[0]:.6g} -> {losses[-1]:.6g}, "
          f"{result['samples_per_s'] or 0:.1f} samples/s, median step {result['step_ms'] or 0:.2f} ms, "
          f"first step {first_step_s:.3f} s, startup {startup_s:.2f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
