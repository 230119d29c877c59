"""Golden test of `model.name: torchscript` against PyTorch itself: for each case a model written in plain PyTorch
is scripted (or traced) and saved, its initial weights written as safetensors; then PyTorch trains the Python
module and bellows trains the scripted file, from those weights, on the same batches in the same order, for
--steps optimizer steps, and the per-step losses and the final weights must agree (fp32: 1e-5 relative;
bf16-mixed: 1e-2). The case "ddp" trains on 2 processes (`bellows launch -n 2`, gloo) against 1 process; the case
"resume" kills a scripted model's run with SIGKILL again and again and resumes it (tests/reliability/kill_soak.py),
and its final weights and trainer state must equal an uninterrupted run's byte for byte (the model has dropout:
the generator's state is part of what resumes).

    scripted_golden.py --bellows BUILD/bin/bellows --work DIR [--steps 20] [--case NAME ...] [-v]

The PyTorch side does what bellows' engine does (bench/peers/peer.py has the same loop for the built-in
models): torch.manual_seed(seed) before the first step (dropout draws from the global generator, in forward
order), batches k*B..(k+1)*B of the file in order (data.shuffle=false), AdamW on the fused kernel with weight
decay on tensors of more than one dimension whose names contain none of bias/norm/bn/ln, a constant learning rate,
the loss of bellows' task (MSE, cross-entropy) or the module's own.
Exit status: 0 all agree, 1 a disagreement (the case, the step or tensor, both values), 2 a run failed.
"""
import argparse
import json
import os
import shutil
import subprocess
import sys

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn
from safetensors.torch import load_file, save_file

NO_DECAY = ("bias", "norm", "bn", "ln")
TOLERANCE = {"fp32": 1e-5, "bf16-mixed": 1e-2, "fp16-mixed": 1e-2}


# --- the models: what a user writes ---------------------------------------------------------------------------

class MlpRegressor(nn.Module):
    def __init__(self):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(16, 64), nn.GELU(), nn.Linear(64, 64), nn.GELU(), nn.Linear(64, 4))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)


class BnCnn(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(3, 16, 3, padding=1)
        self.bn1 = nn.BatchNorm2d(16)
        self.conv2 = nn.Conv2d(16, 32, 3, stride=2, padding=1)
        self.bn2 = nn.BatchNorm2d(32)
        self.fc = nn.Linear(32, 5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = F.relu(self.bn1(self.conv1(x)))
        h = F.relu(self.bn2(self.conv2(h)))
        return self.fc(h.mean(dim=(2, 3)))


class MaskedEncoder(nn.Module):
    """A Transformer encoder with dropout over padded sequences: the padding mask is the second input."""

    def __init__(self):
        super().__init__()
        self.inp = nn.Linear(8, 32)
        layer = nn.TransformerEncoderLayer(32, 4, 64, dropout=0.1, batch_first=True)
        self.encoder = nn.TransformerEncoder(layer, 2, enable_nested_tensor=False)
        self.head = nn.Linear(32, 1)

    def forward(self, x: torch.Tensor, padding: torch.Tensor) -> torch.Tensor:
        pad = padding.to(torch.bool)
        h = self.encoder(self.inp(x), src_key_padding_mask=pad)
        keep = pad.logical_not().unsqueeze(-1).to(h.dtype)
        return self.head((h * keep).sum(1) / keep.sum(1))


class OwnLoss(nn.Module):
    """Returns its own loss in a dict, as Hugging Face models do when given labels; "mae" becomes a metric."""

    def __init__(self):
        super().__init__()
        self.body = nn.Sequential(nn.Linear(16, 32), nn.Tanh(), nn.LayerNorm(32), nn.Linear(32, 4))

    def forward(self, x: torch.Tensor, y: torch.Tensor):
        pred = self.body(x)
        diff = pred - y
        return {"loss": diff.square().mean(), "mae": diff.abs().mean().detach()}


# --- the cases: model, data, bellows' model keys, how PyTorch computes the loss --------------------------------

def data_for(case, n, rng):
    if case in ("mlp", "mlp-bf16", "mlp-fp16", "own-loss", "ddp"):
        x = rng.normal(size=(n, 16)).astype(np.float32)
        y = np.tanh(x[:, :4] * 1.5 + 0.5 * x[:, 4:8]).astype(np.float32)
        return {"x": x, "y": y}
    if case == "cnn-bn":
        x = rng.normal(size=(n, 3, 8, 8)).astype(np.float32)
        y = (np.abs(x[:, 0]).mean(axis=(1, 2)) * 20).astype(np.int64) % 5
        return {"x": x, "y": y}
    if case == "encoder-mask":
        x = rng.normal(size=(n, 12, 8)).astype(np.float32)
        lengths = rng.integers(3, 13, size=n)
        padding = (np.arange(12)[None, :] >= lengths[:, None]).astype(np.int64)
        y = np.array([x[i, :lengths[i], 0].mean() for i in range(n)], dtype=np.float32)[:, None]
        return {"x": x, "padding": padding, "y": y}
    raise ValueError(case)


CASES = {
    # name: (module class, script|trace, precision, bellows model keys, extra arrays, python loss, channels_last, ranks)
    "mlp": (MlpRegressor, "script", "fp32", {"task": "regression"}, [], "regression", False, 1),
    "mlp-bf16": (MlpRegressor, "trace", "bf16-mixed", {"task": "regression"}, [], "regression", False, 1),
    "mlp-fp16": (MlpRegressor, "script", "fp16-mixed", {"task": "regression"}, [], "regression", False, 1),
    "cnn-bn": (BnCnn, "script", "fp32", {"task": "classification"}, [], "classification", True, 1),
    "encoder-mask": (MaskedEncoder, "script", "fp32", {"task": "regression", "inputs": ["x", "padding"]}, ["padding"],
                     "regression", False, 1),
    "own-loss": (OwnLoss, "script", "fp32", {"loss": "module", "inputs": ["x", "y"]}, [], "module", False, 1),
    "ddp": (MlpRegressor, "script", "fp32", {"task": "regression"}, [], "regression", False, 2),
}


def save_scripted(module, how, example):
    if how == "script":
        return torch.jit.script(module)
    return torch.jit.trace(module, example)


def python_losses(case, model, arrays, args, batch_size):
    _, _, precision, keys, extra, loss_kind, channels_last, _ = CASES[case]
    torch.manual_seed(0)
    model.train()
    if channels_last:
        model = model.to(memory_format=torch.channels_last)
    decay, plain = [], []
    for name, p in model.named_parameters():
        (plain if p.dim() <= 1 or any(s in name for s in NO_DECAY) else decay).append(p)
    groups = [g for g in ({"params": decay, "weight_decay": 0.01}, {"params": plain, "weight_decay": 0.0}) if g["params"]]
    optimizer = torch.optim.AdamW(groups, lr=1e-3, fused=True)
    fp16 = precision == "fp16-mixed"
    scaler = torch.amp.GradScaler("cpu", enabled=fp16)  # bellows' GradScaler: the same defaults (init 65536, x2 per 2000 steps)
    tensors = {k: torch.from_numpy(v) for k, v in arrays.items()}
    n = tensors["x"].size(0)
    per_epoch = (n + batch_size - 1) // batch_size
    losses = []
    for step in range(args.steps):
        k = step % per_epoch
        b = {name: t[k * batch_size:min((k + 1) * batch_size, n)] for name, t in tensors.items()}
        if channels_last:
            b["x"] = b["x"].contiguous(memory_format=torch.channels_last)
        with torch.autocast("cpu", dtype=torch.float16 if fp16 else torch.bfloat16, enabled=precision != "fp32"):
            if loss_kind == "module":
                loss = model(b["x"], b["y"])["loss"]
            else:
                inputs = [b["x"]] + [b[e] for e in extra]
                pred = model(*inputs)
                if loss_kind == "regression":
                    target = b["y"].to(pred.dtype).view_as(pred)
                    loss = (pred.float() - target.float()).square().mean()
                else:
                    loss = F.cross_entropy(pred.float(), b["y"].long().view(-1))
        scaler.scale(loss).backward()
        scaler.step(optimizer)
        scaler.update()
        optimizer.zero_grad(set_to_none=True)
        losses.append(loss.item())
    return losses, {k: v.detach().contiguous() for k, v in model.state_dict().items()}


def run(cmd, log):
    with open(log, "w") as f:
        done = subprocess.run(cmd, stdout=f, stderr=subprocess.STDOUT)
    if done.returncode != 0:
        print(f"scripted_golden: FAILED to run (exit {done.returncode}): {' '.join(cmd)}\n--- {log} ---\n"
              f"{open(log).read()[-3000:]}", file=sys.stderr)
        sys.exit(2)


def bellows_run(case, folder, args, batch_size, ranks, masks="torch"):
    _, _, precision, keys, extra, _, channels_last, _ = CASES[case]
    config = {
        "name": case, "seed": 0, "device": "cpu", "precision": precision, "threads": 1,
        "dropout_masks": masks,  # torch: the scripted graphs' dropout is at::dropout, PyTorch's draws (docs/models.md)
        "channels_last": channels_last, "init_weights": os.path.join(folder, "init.safetensors"),
        "output_dir": os.path.join(folder, "runs"),
        "data": {"source": "npy", "path": os.path.join(folder, "train.npz"), "batch_size": batch_size,
                 "shuffle": False, "val_fraction": 0, "workers": 0, "npy": {"extra": extra}},
        "model": {"name": "torchscript", "path": "model.pt", **keys},
        "train": {"max_steps": args.steps, "epochs": 1000, "log_every_n_steps": 1},
        "optim": {"type": "adamw", "lr": 1e-3, "weight_decay": 0.01},
        "schedule": {"type": "constant", "warmup_steps": 0},
    }
    path = os.path.join(folder, "config.yaml" if masks == "torch" else f"config-{masks}.yaml")
    with open(path, "w") as f:  # JSON is YAML; model.path resolves against this file's folder
        json.dump(config, f, indent=1)
    shutil.rmtree(os.path.join(folder, "runs"), ignore_errors=True)
    if ranks > 1:
        cmd = [args.bellows, "launch", "-n", str(ranks), "--", "train", path]
    else:
        cmd = [args.bellows, "train", path]
    run(cmd, os.path.join(folder, "bellows.log"))
    run_dir = os.path.join(folder, "runs", case)
    records = [json.loads(line) for line in open(os.path.join(run_dir, "metrics.jsonl"))]
    steps = {r["step"]: r["loss"] for r in records if r.get("type") == "train"}
    checkpoints = sorted(d for d in os.listdir(os.path.join(run_dir, "checkpoints")) if d.startswith("step-"))
    weights = load_file(os.path.join(run_dir, "checkpoints", checkpoints[-1], "model.safetensors"))
    return [steps.get(s) for s in range(1, args.steps + 1)], weights


def rel(a, b):
    return abs(a - b) / max(abs(a), abs(b), 1e-30)


def check_case(case, args):
    cls, how, precision, keys, extra, loss_kind, channels_last, ranks = CASES[case]
    folder = os.path.join(args.work, case)
    os.makedirs(folder, exist_ok=True)
    rng = np.random.default_rng(7)
    batch_size = 32
    arrays = data_for(case, batch_size * 6, rng)
    np.savez(os.path.join(folder, "train.npz"), **arrays)
    torch.manual_seed(1)
    model = cls()
    save_file({k: v.contiguous() for k, v in model.state_dict().items()}, os.path.join(folder, "init.safetensors"))
    example = tuple(torch.from_numpy(arrays[k][:2]) for k in ["x", *extra])
    save_scripted(cls(), how, example).save(os.path.join(folder, "model.pt"))  # other weights: init_weights replaces them
    if ranks > 1:  # against the same model on one process, both bellows
        ours, our_weights = bellows_run(case, folder, args, batch_size // ranks, ranks)
        theirs, their_weights = bellows_run(case, folder, args, batch_size, 1)
        what = f"{ranks} processes vs 1"
    else:
        ours, our_weights = bellows_run(case, folder, args, batch_size, 1)
        theirs, their_weights = python_losses(case, model, arrays, args, batch_size)
        what = "bellows vs PyTorch"
    tol = TOLERANCE[precision]
    if None in ours:
        print(f"{case}: bellows logged no loss for step {ours.index(None) + 1}", file=sys.stderr)
        return False
    worst = max(rel(a, b) for a, b in zip(ours, theirs))
    names = sorted(set(our_weights) | set(their_weights))
    missing = [n for n in names if n not in our_weights or n not in their_weights]
    weight_diff = 0.0
    for n in names:
        if n in our_weights and n in their_weights and our_weights[n].is_floating_point():
            a, b = our_weights[n].double(), their_weights[n].double()
            weight_diff = max(weight_diff, ((a - b).abs() / (b.abs() + 1e-3)).max().item())
    print(f"{case} ({how}, {precision}, {what}, {args.steps} steps): max relative loss difference {worst:.3g}, "
          f"final weights {weight_diff:.3g} ({len(names)} tensors; tolerance {tol:g})", flush=True)
    if args.verbose:
        for s, (a, b) in enumerate(zip(ours, theirs), 1):
            print(f"  step {s:3d}  bellows {a:.9g}  reference {b:.9g}  rel {rel(a, b):.3g}")
    if missing:
        print(f"{case}: tensor names differ: {missing}", file=sys.stderr)
        return False
    for s, (a, b) in enumerate(zip(ours, theirs), 1):
        if not rel(a, b) <= tol:
            print(f"{case}: losses disagree at step {s}: bellows {a!r}, reference {b!r} (relative {rel(a, b):.3g})", file=sys.stderr)
            return False
    if not weight_diff <= tol * 10:
        print(f"{case}: final weights differ by {weight_diff:.3g} (relative, tolerance {tol * 10:g})", file=sys.stderr)
        return False
    return True


def parallel_masks(args):
    """The encoder-mask case under bellows' default dropout_masks (parallel): the scripted graphs' dropout draws
    bellows' masks, so the losses must differ from PyTorch's (the rewrite reached the dropout of nn.Dropout, a free
    function of the scripted file) while the model trains the same on average (same keep probability and scale)."""
    folder = os.path.join(args.work, "encoder-mask")
    if not os.path.exists(os.path.join(folder, "config.yaml")):
        check_case("encoder-mask", args)
    cls = CASES["encoder-mask"][0]
    arrays = dict(np.load(os.path.join(folder, "train.npz")))
    torch.manual_seed(1)
    model = cls()
    ours, _ = bellows_run("encoder-mask", folder, args, 32, 1, masks="parallel")
    theirs, _ = python_losses("encoder-mask", model, arrays, args, 32)
    if None in ours:
        print(f"parallel-masks: bellows logged no loss for step {ours.index(None) + 1}", file=sys.stderr)
        return False
    differ = sum(1 for a, b in zip(ours, theirs) if a != b)
    mean_ours, mean_theirs = sum(ours) / len(ours), sum(theirs) / len(theirs)
    print(f"parallel-masks (encoder-mask, dropout_masks parallel): {differ} of {len(ours)} losses differ from PyTorch's; "
          f"mean loss {mean_ours:.6g} vs {mean_theirs:.6g} (relative {rel(mean_ours, mean_theirs):.3g}, tolerance 0.1)", flush=True)
    if differ == 0:
        print("parallel-masks: every loss equals PyTorch's: the scripted graphs' dropout did not reach bellows' masks", file=sys.stderr)
        return False
    if not rel(mean_ours, mean_theirs) <= 0.1:
        print("parallel-masks: the mean losses differ by more than 10%: the masks' statistics are not dropout's", file=sys.stderr)
        return False
    return True


def soak(args):
    """The encoder-mask case's files, then kill_soak.py on its config: --soak-kills SIGKILLs, resume=auto each time."""
    folder = os.path.join(args.work, "encoder-mask")
    if not os.path.exists(os.path.join(folder, "config.yaml")):
        check_case("encoder-mask", args)
    here = os.path.dirname(os.path.abspath(__file__))
    cmd = [sys.executable, os.path.join(here, "..", "reliability", "kill_soak.py"), "--bellows", args.bellows,
           "--kills", str(args.soak_kills), "--steps", "150", "--every", "10", "--max-delay", "1.0",
           "--config", os.path.join(folder, "config.yaml"), "--set", "checkpoint.keep_last=3",
           "--set", "dropout_masks=parallel"]  # the default masks: their seeds come from the generator that resumes
    done = subprocess.run(cmd, capture_output=True, text=True)
    summary = [line.strip() for line in done.stdout.splitlines() if "soak:" in line or "bitwise" in line]
    print(f"resume: {'; '.join(summary)}")
    if done.returncode != 0:
        print(f"resume: FAILED (exit {done.returncode}): {' '.join(cmd)}\n{done.stdout[-3000:]}{done.stderr[-3000:]}", file=sys.stderr)
        return False
    return True


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--bellows", required=True)
    ap.add_argument("--work", required=True)
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--case", action="append", choices=sorted([*CASES, "parallel-masks", "resume"]))
    ap.add_argument("--soak-kills", type=int, default=4)
    ap.add_argument("-v", "--verbose", action="store_true")
    args = ap.parse_args()
    torch.set_num_threads(1)
    special = {"resume": soak, "parallel-masks": parallel_masks}
    failed = [c for c in (args.case or [*CASES, *special]) if not (special[c](args) if c in special else check_case(c, args))]
    if failed:
        print(f"scripted_golden: FAILED: {', '.join(failed)}", file=sys.stderr)
        return 1
    print("scripted_golden: all agree")
    return 0


if __name__ == "__main__":
    sys.exit(main())
