"""Tensor memory per rank under each data-parallel strategy (docs/distributed.md): W3 and W7 (its encoder trained,
model.freeze_encoder=false: the fine-tuning that sharding is for) at 1, 2 and 4 processes, fp32, AdamW, the same
global batch, 6 optimizer steps.

Each run's step record at step 6 gives every rank's tensor memory from bellows' counting CPU allocator: `mem_mb` (at
the record: between steps, after the optimizer) and `mem_peak_mb` (the peak over the window), rank 0's under those
names and rank r's as `mem_mb_rank<r>` / `mem_peak_mb_rank<r>`. Memory, not time: the 4-process runs share the two
cores.

    bench/dist/memory.sh [W3 W7] [--ranks 2 --ranks 4] [--out DIR] [--strategy ddp ...] [--auto]

--auto also runs each job with dist.strategy: auto and sets the bytes per rank its plan row predicts for each strategy
(plan/strategy.h: weights, gradients, optimizer state, EMA, the probe step's activations) beside the measured peak of
the busiest rank.

--checkpoints measures what a checkpoint costs instead: each job (zero2 and fsdp at 2 and 4 processes, and one process)
writes its checkpoint at step 6 in the whole and in the sharded layout (checkpoint.layout), and its checkpoint record
(metrics.jsonl, type "checkpoint") gives every rank's tensor memory held before the checkpoint, its peak while it was
written and the training steps' peak; --auto then adds the checkpoint bytes per rank the plan predicts
(plan/strategy.h's checkpoint category) for the layout auto picks.
"""
import argparse
import json
import os
import re
import shutil
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(REPO, "bench", "peers"))
import peer  # noqa: E402
from run import data_for, run, write_results  # noqa: E402

STRATEGIES = ["ddp", "zero1", "zero2", "fsdp"]
EXTRA = {"W7": ["model.freeze_encoder=false"]}


def measure(workload, args, data, ranks, strategy, layout=None):
    w = peer.WORKLOADS[workload]
    name = f"{workload}-mem-{ranks}-{strategy}" + (f"-{layout}" if layout else "")
    out = os.path.join(args.work, "runs")
    shutil.rmtree(os.path.join(out, name), ignore_errors=True)
    train = ["train", os.path.join(REPO, w.config), f"output_dir={out}", f"name={name}", f"data.path={data}",
             f"data.batch_size={w.batch_size // ranks}", "train.max_steps=6", "train.epochs=1000", "train.log_every_n_steps=6",
             "train.eval_every_n_steps=0", f"threads={2 if ranks == 1 else 1}", "precision=fp32",
             *(["checkpoint.enabled=true", "checkpoint.at_end=true", "checkpoint.every_n_steps=0", "checkpoint.every_n_minutes=0",
                f"checkpoint.layout={layout}"] if layout else ["checkpoint.enabled=false"]),
             "data.workers=0", *w.bellows_overrides, *EXTRA.get(workload, [])]
    bellows = os.path.join(args.bin, "bellows")
    if ranks > 1:
        cmd = [bellows, "launch", "-n", str(ranks), "--master-port", str(args.port), "--", *train, f"dist.strategy={strategy}"]
    else:
        cmd = [bellows, *train]
    run(cmd, os.path.join(args.work, f"{name}.log"))
    records = [json.loads(line) for line in open(os.path.join(out, name, "metrics.jsonl"))]
    last = [r for r in records if r.get("type") == "train"][-1]
    now = [last["mem_mb"]] + [last[f"mem_mb_rank{r}"] for r in range(1, ranks)]
    peak = [last["mem_peak_mb"]] + [last[f"mem_peak_mb_rank{r}"] for r in range(1, ranks)]
    header = next(r for r in records if "header" in r)["header"]
    out = {"now": now, "peak": peak, "loss": last["loss"], "strategy_row": header.get("strategy", "")}
    if layout:
        c = [r for r in records if r.get("type") == "checkpoint"][-1]
        suffix = lambda r: "" if r == 0 else f"_rank{r}"  # noqa: E731
        for key in ("mem_held_mb", "mem_peak_mb", "train_peak_mb"):
            out[key] = [c.get(key + suffix(r), float("nan")) for r in range(ranks)]
        out["checkpoint_s"] = c["seconds"]
    return out


def predicted_checkpoint(row):
    """{strategy: (checkpoint MB, total MB)} from an auto run's strategy row ("... checkpoint 1.23)")."""
    return {m.group(1): (float(m.group(3)), float(m.group(2))) for m in
            re.finditer(r"(ddp|zero1|zero2|fsdp) ([0-9.]+) MB \(weights [^)]*checkpoint ([0-9.]+)\)", row)}


def checkpoint_table(args, rows):
    lines = ["| workload | processes | strategy | layout | held before, MB per rank | peak while written | training peak | "
             "peak above training, busiest rank | step waited, s |", "|---|---|---|---|---|---|---|---|---|"]
    for workload in args.workloads:
        data = data_for(workload, args)
        jobs = [(1, "single")] + [(n, s) for n in (args.ranks or [2, 4]) for s in (args.strategy or ["zero2", "fsdp"])]
        for ranks, strategy in jobs:
            for layout in ("whole", "sharded"):
                m = measure(workload, args, data, ranks, strategy, layout)
                rows.append({"workload": workload, "ranks": ranks, "strategy": strategy, "layout": layout, **m})
                above = max(p - t for p, t in zip(m["mem_peak_mb"], m["train_peak_mb"]))
                cells = [" / ".join(f"{x:.2f}" for x in m[k]) for k in ("mem_held_mb", "mem_peak_mb", "train_peak_mb")]
                lines.append(f"| {workload} | {ranks} | {strategy} | {layout} | {' | '.join(cells)} | {above:+.2f} | {m['checkpoint_s']:.3f} |")
                print("  " + lines[-1], flush=True)
    if args.auto:  # the plan's checkpoint category per layout (what a checkpoint adds above the training peak), measured
        lines += ["", "| workload | processes | strategy | layout | predicted checkpoint MB, rank 0 | measured: peak while written above the training peak, rank 0 |",
                  "|---|---|---|---|---|---|"]
        for workload in args.workloads:
            data = data_for(workload, args)
            for ranks in args.ranks or [2, 4]:
                for layout in ("whole", "sharded"):
                    guess = predicted_checkpoint(measure(workload, args, data, ranks, "auto", layout)["strategy_row"])
                    for strategy in args.strategy or ["zero2", "fsdp"]:
                        seen = [r for r in rows if (r["workload"], r["ranks"], r["strategy"], r.get("layout")) == (workload, ranks, strategy, layout)]
                        got = f"{max(0.0, seen[0]['mem_peak_mb'][0] - seen[0]['train_peak_mb'][0]):.2f}" if seen else "not run"
                        want = f"{guess[strategy][0]:.2f}" if strategy in guess else "not predicted"
                        lines.append(f"| {workload} | {ranks} | {strategy} | {layout} | {want} | {got} |")
                        print("  " + lines[-1], flush=True)
    return lines


def predicted(row):
    """{strategy: MB per rank} from an auto run's strategy row ("zero2 2.51 MB (weights ...")."""
    return {m.group(1): float(m.group(2)) for m in re.finditer(r"(ddp|zero1|zero2|fsdp) ([0-9.]+) MB \(weights", row)}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("workloads", nargs="*", help="default: W3 W7")
    ap.add_argument("--ranks", type=int, action="append", help="repeatable; default 2 and 4")
    ap.add_argument("--port", type=int, default=29741)
    ap.add_argument("--out", default=os.path.join(REPO, "build", "dist-memory"))
    ap.add_argument("--bin", default=os.path.join(REPO, "build", "bin"))
    ap.add_argument("--strategy", action="append", choices=STRATEGIES, help="repeatable; default all four")
    ap.add_argument("--auto", action="store_true", help="also dist.strategy: auto, its predictions against the measured peaks")
    ap.add_argument("--checkpoints", action="store_true", help="what a checkpoint costs per rank, whole and sharded layouts")
    args = ap.parse_args()
    args.workloads = args.workloads or ["W3", "W7"]
    args.quick = False
    args.work = os.path.join(args.out, "work")
    args.data_root = os.path.join(args.out, "data")
    os.makedirs(args.work, exist_ok=True)
    rows = []
    if args.checkpoints:
        lines = checkpoint_table(args, rows)
        write_results(args.out, "bench/dist/memory.sh --checkpoints", {"rows": rows}, "\n".join(lines) + "\n")
        return 0
    lines = ["| workload | processes | strategy | between steps, MB per rank | peak, MB per rank | loss at step 6 |", "|---|---|---|---|---|---|"]
    for workload in args.workloads:
        data = data_for(workload, args)
        for ranks, strategy in [(1, "single")] + [(n, s) for n in (args.ranks or [2, 4]) for s in (args.strategy or STRATEGIES)]:
            m = measure(workload, args, data, ranks, strategy)
            rows.append({"workload": workload, "ranks": ranks, "strategy": strategy, **m})
            lines.append(f"| {workload} | {ranks} | {strategy} | {' / '.join(f'{x:.2f}' for x in m['now'])} | "
                         f"{' / '.join(f'{x:.2f}' for x in m['peak'])} | {m['loss']:.5f} |")
            print("  " + lines[-1], flush=True)
    if args.auto:
        lines += ["", "| workload | processes | auto chose | strategy | predicted MB per rank | measured peak, busiest rank |", "|---|---|---|---|---|---|"]
        for workload in args.workloads:
            data = data_for(workload, args)
            for ranks in args.ranks or [2, 4]:
                m = measure(workload, args, data, ranks, "auto")
                guess = predicted(m["strategy_row"])
                chose = m["strategy_row"].split()[0] if m["strategy_row"] else "?"
                rows.append({"workload": workload, "ranks": ranks, "strategy": "auto", "predicted_mb": guess, **m})
                for strategy in args.strategy or STRATEGIES:
                    seen = [r for r in rows if (r["workload"], r["ranks"], r["strategy"]) == (workload, ranks, strategy)]
                    peak = f"{max(seen[0]['peak']):.2f}" if seen else "not run"
                    lines.append(f"| {workload} | {ranks} | {chose} | {strategy} | {guess.get(strategy, float('nan')):.2f} | {peak} |")
                    print("  " + lines[-1], flush=True)
    write_results(args.out, "bench/dist/memory.sh", {"rows": rows}, "\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
