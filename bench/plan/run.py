#!/usr/bin/env python3
"""The autotuner against an exhaustive grid over the same space (issue 18's benchmark target).

For each workload (W1-W4 of ../shared/WORKLOADS.md, their example configs and generated data):
  1. `bellows plan CONFIG plan.allow=[precision,batch_size] --budget B --out tune.json`: the tuner, timed;
  2. `bellows plan ... --grid --trial-seconds L --out grid.json`: every point of the same space, each a trial of
     L s (--grid-trial-seconds, default 5: long enough that the grid is the reference), timed;
  3. the tuner's point as the grid measured it, against the grid's best (the tuner is within 10% when the ratio is
     0.90 or more), and the two wall times (the tuner should take a tenth of the grid's or less);
  4. with --confirm N: the tuner's plan and the grid's best plan, `bellows train --plan` each N times alternately for
     the same steps, so the grid's best is measured again (it is the maximum of many noisy trials: its own trial
     overstates it).
Writes results.json and results.md into --out (default build/plan-bench).

  bench/plan/run.py W1 W2 W3 W4 [--budget 60] [--confirm 3] [--bin build/bin] [--out build/plan-bench]
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
# workload -> (example folder, config, data files the example generator writes)
WORKLOADS = {
    "W1": ("temporal", "examples/temporal/mlp.yaml", "features.csv"),
    "W2": ("temporal", "examples/temporal/lstm.yaml", "series.npy"),
    "W3": ("temporal", "examples/temporal/transformer.yaml", "series.npy"),
    "W4": ("cape-resnet", "examples/cape-resnet/config.yaml", "train"),
}
ALLOW = "plan.allow=[precision,batch_size]"


def run(cmd, cwd, log):
    t0 = time.monotonic()
    with open(log, "w") as err:
        p = subprocess.run(cmd, cwd=cwd, stdout=subprocess.PIPE, stderr=err, text=True)
    if p.returncode != 0:
        sys.exit(f"{' '.join(map(str, cmd))} failed with exit {p.returncode}; see {log}")
    return time.monotonic() - t0, p.stdout


def point_key(overrides):
    return tuple(sorted(overrides))


def train_rate(bellows, config, plan, cwd, steps, tag):
    """samples/s of a `bellows train --plan` run: the median over its records after the first fifth."""
    out = cwd / "confirm" / tag
    subprocess.run(["rm", "-rf", str(out)])
    cmd = [bellows, "train", config, "--plan", plan, f"output_dir={out}", "name=run", "checkpoint.enabled=false",
           "log.tensorboard=false", "train.epochs=100000", f"train.max_steps={steps}", "train.log_every_n_steps=1",
           "train.eval_every_n_steps=1000000000"]
    subprocess.run(cmd, cwd=cwd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    rates = [r["samples_per_s"] for r in map(json.loads, open(out / "run" / "metrics.jsonl")) if r.get("type") == "train"]
    return statistics.median(rates[len(rates) // 5:])


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("workloads", nargs="*", default=["W1", "W2", "W3", "W4"], choices=sorted(WORKLOADS))
    ap.add_argument("--budget", type=float, default=60, help="the tuner's budget, s")
    ap.add_argument("--confirm", type=int, default=5, help="alternating train runs of each plan (0: none)")
    ap.add_argument("--grid-trial-seconds", type=float, default=5, help="training per grid point, s")
    ap.add_argument("--reuse-grid", action="store_true", help="keep a grid.json (and its time) from an earlier run")
    ap.add_argument("--bin", default=str(REPO / "build" / "bin"))
    ap.add_argument("--out", default=str(REPO / "build" / "plan-bench"))
    ap.add_argument("--work", default="/tmp/bellows-plan-bench", help="where the example data is generated")
    args = ap.parse_args()
    bellows = str(Path(args.bin) / "bellows")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    hw = subprocess.run([bellows, "hw"], stdout=subprocess.PIPE, text=True, check=True).stdout
    (out / "hw.txt").write_text(hw)
    results = []
    for w in args.workloads:
        example, config, marker = WORKLOADS[w]
        work = Path(args.work) / example
        if not (work / "data" / marker).exists():
            subprocess.run([str(Path(args.bin) / "bellows_example_data"), example, str(work / "data")], check=True)
        config = str(REPO / config)
        wdir = out / w
        wdir.mkdir(exist_ok=True)
        print(f"{w}: tuner ({args.budget:.0f} s budget)", flush=True)
        t_tune, _ = run([bellows, "plan", config, ALLOW, "--budget", f"{args.budget}s", "--out", str(wdir / "tune.json")], work, wdir / "tune.log")
        tune = json.load(open(wdir / "tune.json"))
        if args.reuse_grid and (wdir / "grid.json").exists() and (wdir / "grid.time").exists():
            t_grid = float((wdir / "grid.time").read_text())
        else:
            print(f"{w}: grid ({args.grid_trial_seconds:.1f} s trials)", flush=True)
            t_grid, _ = run([bellows, "plan", config, ALLOW, "--grid", "--trial-seconds", f"{args.grid_trial_seconds}s", "--out",
                             str(wdir / "grid.json")], work, wdir / "grid.log")
            (wdir / "grid.time").write_text(f"{t_grid}\n")
        grid = json.load(open(wdir / "grid.json"))
        measured = {point_key(t["overrides"]): t["samples_per_s"] for t in grid["trials"] if t["samples_per_s"] > 0}
        best = max(measured.values())
        tuned_in_grid = measured.get(point_key(tune["overrides"]), 0.0)
        row = {"workload": w, "config": os.path.relpath(config, REPO), "grid_points": len(grid["trials"]),
               "tune_trials": len(tune["trials"]), "tune_s": t_tune, "grid_s": t_grid, "time_ratio": t_tune / t_grid,
               "tune_overrides": tune["overrides"], "grid_overrides": grid["overrides"], "grid_best": best,
               "tuned_in_grid": tuned_in_grid, "ratio_in_grid": tuned_in_grid / best, "baseline": tune["baseline_samples_per_s"]}
        if args.confirm > 0:
            # Steps for about 5 s at the grid's best rate (samples per step from a grid trial).
            batch = None
            for t in grid["trials"]:
                if t["steps"] > 0 and t["samples_per_s"] > 0:
                    batch = t["samples_per_s"] * t["step_ms"] / 1e3
                    break
            steps = max(20, int(5 * best / batch)) if batch else 100
            a, b = [], []
            for i in range(args.confirm):
                pair = [("tune", wdir / "tune.json", a), ("grid", wdir / "grid.json", b)]
                for tag, plan, into in (pair if i % 2 == 0 else pair[::-1]):
                    into.append(train_rate(bellows, config, str(plan), work, steps, f"{w}-{tag}"))
            row.update({"confirm_steps": steps, "confirm_tune": a, "confirm_grid": b,
                        "confirm_ratio": statistics.median(a) / statistics.median(b)})
        results.append(row)
        print(json.dumps(row, indent=1), flush=True)
    (out / "results.json").write_text(json.dumps(results, indent=2) + "\n")
    lines = ["| workload | grid points | grid s | tuner trials | tuner s | time ratio | tuner's plan | grid's best | tuner's point in the grid / grid best | confirmed: tuner / grid (median of runs) |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for r in results:
        conf = f"{r['confirm_ratio']:.2f} ({statistics.median(r['confirm_tune']):.0f} / {statistics.median(r['confirm_grid']):.0f})" if "confirm_ratio" in r else "-"
        lines.append(f"| {r['workload']} | {r['grid_points']} | {r['grid_s']:.0f} | {r['tune_trials']} | {r['tune_s']:.0f} | {r['time_ratio']:.3f} | "
                     f"{' '.join(r['tune_overrides']) or 'as configured'} | {' '.join(r['grid_overrides']) or 'as configured'} | "
                     f"{r['ratio_in_grid']:.2f} ({r['tuned_in_grid']:.0f} / {r['grid_best']:.0f}) | {conf} |")
    (out / "results.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
