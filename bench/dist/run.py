"""Data parallel on one machine: 2 processes x 1 thread (`bellows launch -n 2`, Gloo) against 1 process x 2 threads
(`bellows train`), same global batch, alternating trials, for W1 and W3 (or the workloads named).

Reports per workload and bucket size: samples/s of each (median and range), their ratio (the scaling efficiency of
data parallel on the same cores), and from bellows' step records the communication per optimizer step: comm_ms
(first bucket launched to last one done) and comm_wait_ms (what the step waited for after backward), so that
1 - wait/comm is the fraction of the communication hidden behind backward.

With --zero1 / --zero2 / --fsdp, 2 processes under dist.strategy zero1 (the optimizer state sharded: dist/zero.h),
zero2 (the gradients too: reduced to their owner instead of all-reduced) or fsdp (the blocks' weights too, gathered
block by block: dist/fsdp.h; models with blocks only, so not W1) at the first bucket size too: the cost of the
parameters' broadcasts after each step, of zero2's reduces and of fsdp's gathers, against ddp.

With --volume, instead of timing: the bytes each 2-process system puts on the loopback interface per optimizer step
(/proc/net/dev's `lo` transmit counter read around two runs of different lengths, so that the rendezvous, the first
broadcast and the end cancel; divided by the steps between them and by the 2 ranks), beside the ring formula in the
parameters' bytes P: ddp 2P(W-1)/W, zero1 3P(W-1)/W, zero2 2P(W-1)/W, fsdp 3P(W-1)/W (W = 2). Nothing else may use
the loopback interface meanwhile.

    bench/dist/run.sh [W1 W3] [--trials 3] [--bucket-mb 25 --bucket-mb 1] [--zero1] [--zero2] [--fsdp] [--volume] [--out DIR]
"""
import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(REPO, "bench", "peers"))
import check  # noqa: E402  (bench/peers: the example data of each workload)
import peer  # noqa: E402
from run import data_for, run, write_results, STEPS  # noqa: E402


def trial(workload, args, data, system, bucket_mb, t):
    w = peer.WORKLOADS[workload]
    warmup, steps = STEPS[workload]
    steps = max(steps, warmup * 3) - max(steps, warmup * 3) % warmup
    name = f"{workload}-{system}-{bucket_mb:g}-t{t}"
    out = os.path.join(args.work, "runs")
    shutil.rmtree(os.path.join(out, name), ignore_errors=True)
    procs = 2 if system.startswith("2x1") else 1
    batch = w.batch_size // procs  # the same global batch
    train = ["train", os.path.join(REPO, w.config), f"output_dir={out}", f"name={name}", f"data.path={data}", "data.val_fraction=0",
             f"data.batch_size={batch}", f"train.max_steps={warmup + steps}", "train.epochs=1000", f"train.log_every_n_steps={warmup}",
             "train.eval_every_n_steps=0", "checkpoint.enabled=false", f"threads={2 // procs}", "precision=fp32",
             "schedule.type=constant", "schedule.warmup_steps=0", f"dist.bucket_mb={bucket_mb}", *w.bellows_overrides]
    if system.startswith("2x1-") and system != "2x1":
        train.append("dist.strategy=" + system.split("-")[1])
    bellows = os.path.join(args.bin, "bellows")
    cmd = [bellows, "launch", "-n", "2", "--master-port", str(args.port), "--", *train] if procs == 2 else [bellows, *train]
    run(cmd, os.path.join(args.work, f"{name}.log"))
    records = [json.loads(line) for line in open(os.path.join(out, name, "metrics.jsonl"))]
    rec = {r["step"]: r for r in records if r.get("type") == "train"}
    a, b = rec[warmup], rec[warmup + steps]
    seconds = b["elapsed_s"] - a["elapsed_s"]
    later = [r for s, r in rec.items() if warmup < s <= warmup + steps]
    comm = [r["comm_ms"] for r in later if "comm_ms" in r]
    wait = [r["comm_wait_ms"] for r in later if "comm_wait_ms" in r]
    return {"samples_per_s": steps * w.batch_size * w.accumulation / seconds, "step_ms": 1e3 * seconds / steps,
            "comm_ms": statistics.mean(comm) if comm else None, "comm_wait_ms": statistics.mean(wait) if wait else None}


def loopback_tx_bytes():
    with open("/proc/net/dev") as f:
        for line in f:
            name, _, rest = line.partition(":")
            if name.strip() == "lo":
                return int(rest.split()[8])  # receive: 8 fields, then transmit bytes
    sys.exit("run: no loopback interface in /proc/net/dev")


def trainable_elements(run_dir):
    """The trainable parameter elements that a sharded strategy's plan row names ("... of N parameter elements"), or None."""
    for line in open(os.path.join(run_dir, "metrics.jsonl")):
        header = json.loads(line).get("header")
        if header:
            found = re.search(r" of (\d+) parameter elements", header.get("strategy", ""))
            return int(found.group(1)) if found else None
    return None


FORMULA = {"ddp": 2.0, "zero1": 3.0, "zero2": 2.0, "fsdp": 3.0}  # x P (W-1)/W


def volume(workload, args, data, strategy):
    """Loopback bytes per rank and optimizer step of 2 processes under `strategy` (see the module's docstring)."""
    w = peer.WORKLOADS[workload]
    warmup, steps = STEPS[workload]
    out = os.path.join(args.work, "runs")
    sent = []
    for n in (warmup, warmup + steps):
        name = f"{workload}-volume-{strategy}-{n}"
        shutil.rmtree(os.path.join(out, name), ignore_errors=True)
        train = ["train", os.path.join(REPO, w.config), f"output_dir={out}", f"name={name}", f"data.path={data}", "data.val_fraction=0",
                 f"data.batch_size={w.batch_size // 2}", f"train.max_steps={n}", "train.epochs=1000", f"train.log_every_n_steps={warmup}",
                 "train.eval_every_n_steps=0", "checkpoint.enabled=false", "threads=1", "precision=fp32", "schedule.type=constant",
                 "schedule.warmup_steps=0", f"dist.bucket_mb={args.bucket_mb[0] if args.bucket_mb else 25}", f"dist.strategy={strategy}",
                 *w.bellows_overrides]
        before = loopback_tx_bytes()
        run([os.path.join(args.bin, "bellows"), "launch", "-n", "2", "--master-port", str(args.port), "--", *train],
            os.path.join(args.work, f"{name}.log"))
        sent.append(loopback_tx_bytes() - before)
    return (sent[1] - sent[0]) / steps / 2, os.path.join(out, name)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("workloads", nargs="*", help="W1 ... W7 (default: W1 W3)")
    ap.add_argument("--trials", type=int, default=3)
    ap.add_argument("--bucket-mb", type=float, action="append", help="repeatable; default 25 and 1")
    ap.add_argument("--zero1", action="store_true", help="also 2 processes under dist.strategy zero1 (first bucket size)")
    ap.add_argument("--zero2", action="store_true", help="also 2 processes under dist.strategy zero2 (first bucket size)")
    ap.add_argument("--fsdp", action="store_true", help="also 2 processes under dist.strategy fsdp (first bucket size; models with blocks)")
    ap.add_argument("--volume", action="store_true", help="bytes on the loopback interface per step instead of timings")
    ap.add_argument("--port", type=int, default=29731)
    ap.add_argument("--out", default=os.path.join(REPO, "build", "dist-bench"))
    ap.add_argument("--bin", default=os.path.join(REPO, "build", "bin"))
    args = ap.parse_args()
    args.workloads = args.workloads or ["W1", "W3"]
    for w in args.workloads:
        if w not in peer.WORKLOADS:
            sys.exit(f"run: unknown workload '{w}'; choose from {', '.join(sorted(peer.WORKLOADS))}")
    if args.trials < 3:
        sys.exit("run: at least 3 trials")
    args.quick = False
    args.work = os.path.join(args.out, "work")
    args.data_root = os.path.join(args.out, "data")
    os.makedirs(args.work, exist_ok=True)
    buckets = args.bucket_mb or [25.0, 1.0]
    if args.volume:
        strategies = ["ddp"] + [s for s in ("zero1", "zero2", "fsdp") if getattr(args, s)]
        lines = ["| workload | trainable parameters' bytes P | strategy | loopback bytes per rank and step | / (P (W-1)/W) | ring formula |",
                 "|---|---|---|---|---|---|"]
        rows = []
        for workload in args.workloads:
            data = data_for(workload, args)
            measured, elements = [], None
            for strategy in strategies:
                per_step, run_dir = volume(workload, args, data, strategy)
                elements = elements or trainable_elements(run_dir)
                measured.append((strategy, per_step))
                print(f"  {workload} {strategy}: {per_step:,.0f} bytes per rank and step on the loopback interface", flush=True)
            p_bytes = 4 * elements if elements else None  # fp32
            for strategy, per_step in measured:
                rows.append({"workload": workload, "strategy": strategy, "bytes_per_rank_step": per_step, "parameter_bytes": p_bytes})
                ratio = f"{per_step / (p_bytes / 2):.2f}" if p_bytes else "-"
                lines.append(f"| {workload} | {p_bytes or '-'} | {strategy} | {per_step:,.0f} | {ratio} | {FORMULA[strategy]:g} |")
        write_results(args.out, "bench/dist/run.sh --volume", {"rows": rows}, "\n".join(lines) + "\n")
        return 0
    lines = ["| workload | global batch | 1 process x 2 threads, samples/s | strategy | bucket MiB | 2 processes x 1 thread, samples/s | "
             "2x1 / 1x2 | comm ms/step | waited ms/step | comm hidden behind backward |", "|---|---|---|---|---|---|---|---|---|---|"]
    rows = []
    for workload in args.workloads:
        data = data_for(workload, args)
        systems = ([("1x2", buckets[0])] + [("2x1", b) for b in buckets] + ([("2x1-zero1", buckets[0])] if args.zero1 else [])
                   + ([("2x1-zero2", buckets[0])] if args.zero2 else []) + ([("2x1-fsdp", buckets[0])] if args.fsdp else []))
        results = {s: [] for s in systems}
        for t in range(args.trials):
            rotated = systems[t % len(systems):] + systems[:t % len(systems)]
            for s in rotated:
                results[s].append(trial(workload, args, data, s[0], s[1], t))
                r = results[s][-1]
                print(f"  {workload} trial {t + 1}/{args.trials} {s[0]} bucket {s[1]:g} MiB: {r['samples_per_s']:.1f} samples/s, "
                      f"step {r['step_ms']:.2f} ms" + (f", comm {r['comm_ms']:.2f} ms, waited {r['comm_wait_ms']:.2f} ms" if r["comm_ms"] else ""),
                      flush=True)
        med = {s: statistics.median(x["samples_per_s"] for x in v) for s, v in results.items()}
        one = results[systems[0]]
        for s in systems[1:]:
            comm = statistics.median(x["comm_ms"] for x in results[s])
            wait = statistics.median(x["comm_wait_ms"] for x in results[s])
            v = [x["samples_per_s"] for x in results[s]]
            o = [x["samples_per_s"] for x in one]
            strategy = s[0].split("-")[1] if s[0].startswith("2x1-") else "ddp"
            row = {"workload": workload, "batch": peer.WORKLOADS[workload].batch_size, "strategy": strategy, "bucket_mb": s[1], "one_by_two": med[systems[0]],
                   "two_by_one": med[s], "ratio": med[s] / med[systems[0]], "comm_ms": comm, "wait_ms": wait,
                   "hidden": 1 - wait / comm if comm > 0 else 0.0, "trials": {"1x2": o, "2x1": v}}
            rows.append(row)
            lines.append(f"| {workload} {peer.WORKLOADS[workload].name} | {row['batch']} | {med[systems[0]]:.0f} ({min(o):.0f}-{max(o):.0f}) | "
                         f"{strategy} | {s[1]:g} | {med[s]:.0f} ({min(v):.0f}-{max(v):.0f}) | {row['ratio']:.2f} | {comm:.2f} | {wait:.2f} | "
                         f"{100 * row['hidden']:.0f}% |")
    write_results(args.out, "bench/dist/run.sh", {"rows": rows}, "\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
