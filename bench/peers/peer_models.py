# The PyTorch peer's models (bench/peers/peer.py): bellows' built-in models with its module tree, the Linear that
# --cpp-linear swaps, the losses of bellows' tasks and the objective (model + loss) a step calls. W6's graph network
# is in peer_gnn.py.
import math

import torch
import torch.nn as nn
import torch.nn.functional as F


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
