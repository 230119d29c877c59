#!/usr/bin/env python3
# Golden sequences for bellows' GradScaler, recorded from PyTorch's own torch.amp.GradScaler("cpu"): fixed
# parameters, fixed (already scaled) gradients written straight into .grad with inf/NaN injected on some steps,
# plain SGD (no momentum), and a small growth_interval so that the scale grows, backs off and grows again.
# tests/unit/precision/grad_scaler_golden_test.cpp replays each step through bellows and compares.
#
#   ~/.cache/bellows/torch-2.13.0/bin/python tests/golden/gen_grad_scaler.py   # rewrites grad_scaler.json
#
# Every float is written with float.hex() ("0x1.8p+3", "inf", "-inf", "nan"), so nothing is lost to decimal
# printing and JSON needs no non-standard Infinity/NaN literals.
import json
import os
import sys

import torch

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "grad_scaler.json")
INF, NAN = float("inf"), float("nan")


def hexes(t):
    return [float(v).hex() for v in t.detach().double().flatten().tolist()]


def record(name, options, lr, shapes, steps, seed, explicit_unscale_steps):
    """Runs one scenario. `steps` lists, per step, the injections {(param index, flat index): value}."""
    gen = torch.Generator().manual_seed(seed)
    params = [torch.nn.Parameter(torch.randn(s, generator=gen, dtype=torch.float32)) for s in shapes]
    frozen = torch.nn.Parameter(torch.randn(3, generator=gen, dtype=torch.float32))  # never gets a .grad
    opt = torch.optim.SGD(params + [frozen], lr=lr, momentum=0.0, foreach=False)
    scaler = torch.amp.GradScaler("cpu", **options)

    scenario = {
        "name": name,
        "options": {k: (float(v).hex() if isinstance(v, float) else v) for k, v in options.items()},
        "lr": float(lr).hex(),
        "shapes": [list(s) for s in shapes],
        "params_init": [hexes(p) for p in params],
        "frozen_init": hexes(frozen),
        "steps": [],
    }
    for i, injections in enumerate(steps):
        # scale() creates the scale tensor on first use; its value also checks scale() itself.
        scaled_one = scaler.scale(torch.ones((), dtype=torch.float32))
        scale_before = scaler.get_scale()
        # Gradients as a backward pass of a scaled loss would leave them: true gradient (~1e-3) times the scale.
        grads = []
        for p in params:
            g = torch.randn(p.shape, generator=gen, dtype=torch.float32) * 1e-3 * scale_before
            grads.append(g)
        for (pi, fi), v in injections.items():
            grads[pi].view(-1)[fi] = v
        for p, g in zip(params, grads):
            p.grad = g.clone()
        before = [p.detach().clone() for p in params]
        explicit = i in explicit_unscale_steps
        if explicit:
            scaler.unscale_(opt)
        scaler.step(opt)
        scaler.update()
        changed = [not torch.equal(b, p.detach()) for b, p in zip(before, params)]
        skipped = not any(changed)
        if skipped != bool(injections):
            sys.exit(f"{name} step {i}: skipped={skipped} but injections={injections}")
        scenario["steps"].append({
            "explicit_unscale": explicit,
            "scaled_one": float(scaled_one).hex(),
            "scale_before": float(scale_before).hex(),
            "grads": [hexes(g) for g in grads],
            "injected": [[pi, fi, float(v).hex()] for (pi, fi), v in injections.items()],
            "skipped": skipped,
            "scale_after": float(scaler.get_scale()).hex(),
            "growth_tracker_after": scaler._get_growth_tracker(),
            "grads_after": [hexes(p.grad) for p in params],  # unscaled in place by unscale_/step
            "params_after": [hexes(p) for p in params],
        })
    if frozen.grad is not None or not torch.equal(frozen.detach(), torch.tensor([float.fromhex(h) for h in scenario["frozen_init"]])):
        sys.exit(f"{name}: the parameter without a gradient changed")
    scenario["final_state_dict"] = {k: (float(v).hex() if isinstance(v, float) else v)
                                    for k, v in scaler.state_dict().items()}
    return scenario


def main():
    clean = {}
    # growth_interval 3: growth after steps 2, 7, 12; backoff on 4, 8, 9; tracker reset by each skip.
    default_steps = [
        clean, clean, clean,            # 0-2: three clean steps -> x2 after step 2
        clean,                          # 3
        {(0, 1): INF},                  # 4: +inf in one element -> skip, x0.5
        clean, clean, clean,            # 5-7: -> x2 after step 7
        {(1, 4): NAN},                  # 8: NaN -> skip, x0.5
        {(0, 0): -INF, (2, 0): NAN},    # 9: -inf and NaN in two tensors -> skip, x0.5 again
        clean, clean, clean,            # 10-12: -> x2 after step 12
        clean,                          # 13
    ]
    scenarios = [
        record("default_factors", {"init_scale": 65536.0, "growth_factor": 2.0, "backoff_factor": 0.5,
                                   "growth_interval": 3},
               lr=0.1, shapes=[(4,), (2, 3), (1,)], steps=default_steps, seed=1234,
               explicit_unscale_steps={1, 4, 6, 9}),
        # Factors that are not powers of two: the scale leaves the exact binary grid, so any difference in
        # how bellows applies growth/backoff (order, precision) shows up bit for bit.
        record("odd_factors", {"init_scale": 1000.0, "growth_factor": 1.5, "backoff_factor": 0.3,
                               "growth_interval": 2},
               lr=0.05, shapes=[(5,), (3,)],
               steps=[clean, clean, {(1, 2): INF}, clean, clean, clean, {(0, 3): NAN}, clean, clean],
               seed=99, explicit_unscale_steps={0, 2}),
    ]
    doc = {
        "generator": "tests/golden/gen_grad_scaler.py",
        "torch_version": torch.__version__,
        "reference": 'torch.amp.GradScaler("cpu") + torch.optim.SGD(momentum=0, foreach=False)',
        "float_encoding": "float.hex()",
        "scenarios": scenarios,
    }
    with open(OUT, "w") as f:
        json.dump(doc, f, indent=1)
        f.write("\n")
    print(f"wrote {OUT}: {sum(len(s['steps']) for s in scenarios)} steps in {len(scenarios)} scenarios")


if __name__ == "__main__":
    main()
