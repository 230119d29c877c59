#!/usr/bin/env python3
# Golden trajectories for bellows' optimizers, recorded from PyTorch's own torch.optim.AdamW, Adam and SGD
# (single-tensor implementation: foreach=False, fused=False, the plainest reading of PyTorch's semantics).
# A decayed 2-D weight and an undecayed bias in two parameter groups, fixed gradients written into .grad,
# the learning rate changed before every step, and one parameter without a gradient on some steps.
# tests/unit/train/optimizer_test.cpp (OptimizerGolden) replays each scenario through bellows' fused and foreach paths.
#
#   ~/.cache/bellows/torch-2.13.0/bin/python tests/golden/gen_optim_reference.py   # rewrites optim_reference.json
#
# Floats are written with float.hex(), so nothing is lost to decimal printing.
import json
import os

import torch

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "optim_reference.json")
STEPS = 5
WEIGHT_DECAY = 0.1


def hexes(t):
    return [float(v).hex() for v in t.detach().double().flatten().tolist()]


def lr_at(step):  # 1-based step; the same schedule the C++ test applies through set_lr
    return 0.05 * (1.0 - 0.1 * step)


def record(name, make_optimizer, options, skip, seed):
    """`skip`: {step: [parameter indices without a gradient that step]}."""
    gen = torch.Generator().manual_seed(seed)
    names = ["fc.weight", "fc.bias"]
    params = [torch.nn.Parameter(torch.randn(4, 3, generator=gen)), torch.nn.Parameter(torch.randn(4, generator=gen))]
    opt = make_optimizer([{"params": [params[0]], "weight_decay": WEIGHT_DECAY},
                          {"params": [params[1]], "weight_decay": 0.0}])
    scenario = {"name": name, "options": options, "weight_decay": WEIGHT_DECAY.hex(), "names": names,
                "shapes": [list(p.shape) for p in params], "params_init": [hexes(p) for p in params], "steps": []}
    for step in range(1, STEPS + 1):
        grads = []
        for i, p in enumerate(params):
            g = torch.randn(p.shape, generator=gen)
            if i in skip.get(step, []):
                p.grad = None
                grads.append(None)
            else:
                p.grad = g
                grads.append(hexes(g))
        for group in opt.param_groups:
            group["lr"] = lr_at(step)
        opt.step()
        scenario["steps"].append({"lr": float(lr_at(step)).hex(), "grads": grads,
                                  "params_after": [hexes(p) for p in params]})
    return scenario


def main():
    plain = dict(foreach=False, fused=False)
    skip = {2: [1], 3: [0]}
    scenarios = [
        record("adamw", lambda g: torch.optim.AdamW(g, lr=lr_at(1), betas=(0.9, 0.999), eps=1e-8, **plain),
               {"type": "adamw", "beta1": 0.9, "beta2": 0.999, "eps": 1e-8}, skip, seed=1),
        record("adam", lambda g: torch.optim.Adam(g, lr=lr_at(1), betas=(0.8, 0.99), eps=1e-6, **plain),
               {"type": "adam", "beta1": 0.8, "beta2": 0.99, "eps": 1e-6}, skip, seed=2),
        record("sgd_momentum_dampening",
               lambda g: torch.optim.SGD(g, lr=lr_at(1), momentum=0.9, dampening=0.2, **plain),
               {"type": "sgd", "momentum": 0.9, "dampening": 0.2, "nesterov": False}, skip, seed=3),
        record("sgd_nesterov", lambda g: torch.optim.SGD(g, lr=lr_at(1), momentum=0.8, nesterov=True, **plain),
               {"type": "sgd", "momentum": 0.8, "dampening": 0.0, "nesterov": True}, skip, seed=4),
        record("sgd_plain", lambda g: torch.optim.SGD(g, lr=lr_at(1), **plain),
               {"type": "sgd", "momentum": 0.0, "dampening": 0.0, "nesterov": False}, {}, seed=5),
    ]
    for s in scenarios:  # float options as hex too
        s["options"] = {k: (float(v).hex() if isinstance(v, float) else v) for k, v in s["options"].items()}
    doc = {
        "generator": "tests/golden/gen_optim_reference.py",
        "torch_version": torch.__version__,
        "reference": "torch.optim.AdamW / Adam / SGD with foreach=False, fused=False; float32 parameters",
        "float_encoding": "float.hex()",
        "scenarios": scenarios,
    }
    with open(OUT, "w") as f:
        json.dump(doc, f, indent=1)
        f.write("\n")
    print(f"wrote {OUT}: {len(scenarios)} scenarios of {STEPS} steps")


if __name__ == "__main__":
    main()
