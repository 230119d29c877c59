"""Host-bound twins (issue 43): bellows' per-step host cost against PyTorch eager's, on the CPU, one thread.

The twins (bench/peers/peer.py TWINS) are workloads W1, W3, W4 and W5 shrunk until a step costs mostly host time
(operator dispatch, autograd bookkeeping, the optimizer's launches, the loop around them) rather than arithmetic:
W1 an MLP 64-16-16-1 at batch 4; W3 issue 43's Transformer (d_model 16, 2 heads, 2 layers, ff 32, windows of 8,
batch 4); W4 a ResNet-18 of width 0.125 (8 channels first) on 24x24 center crops (at 16x16 the fp32 losses part from step 2), micro-batches of 2, the example's
accumulation 2, clipping and channels_last; W5 the DDPM with hidden 16 at batch 4. Each twin carries the bellows
overrides that build the identical model on the same example config.

Per workload (bench/peers/host_twins.sh runs this; it does not build: build/bin must exist):
  1. the example's --quick data (build/bin/bellows_example_data), as run.py --quick makes it;
  2. one initial-weights file (peer.py --twin --write-init) and check.py's agreement test on the twin: bellows and
     eager PyTorch train --check-steps steps from it on the same batches, fp32 losses within 1e-5 relative, else the
     script stops (no timing of systems that compute different things);
  3. --trials alternating rounds, bellows first in odd rounds and the peer first in even ones:
     `bellows train` (the example config + the twin's overrides + threads=1, data.workers as bellows plans it,
     constant LR, no evaluation, no checkpoints, a train record every --window steps) and
     `peer.py --twin --mode eager --threads 1` (the steps timed one by one with perf_counter, loss.item() each);
     each runs --steps optimizer steps of which the first --warmup are discarded;
  4. per system and trial the median over the steady-state windows of --window steps of the mean ms per optimizer
     step (bellows: each window's `step_time_ms` in metrics.jsonl; the peer: its per-step times grouped into the
     same windows), then the median and range over the trials and bellows/PyTorch (< 1: bellows is cheaper). The
     peer's plain per-step median is reported too, and bellows' phases (time_<phase>_ms, medians over windows).
Results: OUT/results.md (the table) and OUT/results.json.
   host_twins.py [W1 W3 W4 W5] [--trials 3] [--steps 800] [--warmup 100] [--window 10] [--out DIR]
"""
import argparse
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)
import check  # noqa: E402
import peer  # noqa: E402
from run import run, write_results  # noqa: E402  (run: a command with its log; stops the script naming it)

PHASES = ("data", "copy", "forward", "backward", "optimizer", "other")


def cpu_model():
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def data_for(workload, args):
    example, file = check.EXAMPLES[workload]
    folder = os.path.join(args.data_root, example)
    if not os.path.exists(os.path.join(folder, file)):
        run([os.path.join(args.bin, "bellows_example_data"), example, folder, "--quick"],
            os.path.join(args.work, f"data-{example}.log"))
    return os.path.join(folder, file)


def windows(times_ms, window):
    """The means of consecutive groups of `window` step times (a last, shorter group is dropped)."""
    return [statistics.fmean(times_ms[i:i + window]) for i in range(0, len(times_ms) - window + 1, window)]


def bellows_trial(workload, init, data, args, trial):
    w = peer.TWINS[workload]
    out = os.path.join(args.work, "runs")
    name = f"{workload}-twin-t{trial}"
    shutil.rmtree(os.path.join(out, name), ignore_errors=True)
    cmd = [os.path.join(args.bin, "bellows"), "train", os.path.join(REPO, w.config), f"output_dir={out}", f"name={name}",
           f"data.path={data}", "data.shuffle=false", "data.val_fraction=0", f"train.max_steps={args.steps}",
           "train.epochs=100000", f"train.log_every_n_steps={args.window}", "train.eval_every_n_steps=0",
           "checkpoint.enabled=false", "threads=1", "precision=fp32", "schedule.type=constant",
           "schedule.warmup_steps=0", f"init_weights={init}", *w.bellows_overrides]
    wall = run(cmd, os.path.join(args.work, f"{name}.log"))
    records = [json.loads(line) for line in open(os.path.join(out, name, "metrics.jsonl"))]
    train = [r for r in records if r.get("type") == "train"]
    # a record at step s covers the steps after the previous record: (s - window, s]
    steady = [r for r in train if r["step"] - args.window >= args.warmup]
    if len(steady) * args.window != args.steps - args.warmup:
        sys.exit(f"host_twins: {workload}: bellows logged {len(steady)} train records after step {args.warmup}, expected "
                 f"{(args.steps - args.warmup) // args.window} ({os.path.join(out, name, 'metrics.jsonl')})")
    ms = [r["step_time_ms"] for r in steady]
    a = next(r for r in train if r["step"] == args.warmup)
    b = steady[-1]
    return {"ms": statistics.median(ms), "windows_ms": ms,
            "mean_ms_elapsed": 1e3 * (b["elapsed_s"] - a["elapsed_s"]) / (args.steps - args.warmup),
            "phases_ms": {p: statistics.median(r.get(f"time_{p}_ms", 0.0) for r in steady) for p in PHASES},
            "wall_s": wall, "loss": b["loss"], "command": " ".join(cmd)}


def peer_trial(workload, init, data, args, trial):
    out = os.path.join(args.work, f"{workload}-twin-eager-t{trial}.json")
    cmd = [args.python, os.path.join(HERE, "peer.py"), "--workload", workload, "--twin", "--data", data, "--init", init,
           "--steps", str(args.steps - args.warmup), "--warmup", str(args.warmup), "--mode", "eager",
           "--precision", "fp32", "--threads", "1", "--json", out]
    wall = run(cmd, out.replace(".json", ".log"))
    with open(out) as f:
        j = json.load(f)
    ms = windows(j["step_ms_all"], args.window)
    return {"ms": statistics.median(ms), "windows_ms": ms, "step_median_ms": j["step_ms"],
            "mean_ms": statistics.fmean(j["step_ms_all"]), "wall_s": wall, "loss": j["losses"][-1],
            "command": " ".join(cmd)}


def summary(values):
    return {"median": statistics.median(values), "min": min(values), "max": max(values), "trials": values}


def bench(workload, args):
    w = peer.TWINS[workload]
    data = data_for(workload, args)
    # check.data_path finds the data made above at <data_root>/<example>/<file>
    check_args = argparse.Namespace(work=args.work, bin=args.bin, python=args.python, steps=args.check_steps, threads=1,
                                    tolerance=0.0, data_root=args.data_root, cpp_linear=False, unfreeze_encoder=False,
                                    verbose=args.verbose, twin=True)
    ok, worst = check.check(workload, "fp32", check_args)  # writes the init file
    if not ok:
        sys.exit(f"host_twins: {workload} twin: bellows and PyTorch disagree (above); no timing is reported for systems "
                 "that compute different things")
    init = check.init_path(workload, check_args)
    systems = {"bellows": lambda t: bellows_trial(workload, init, data, args, t),
               "pytorch": lambda t: peer_trial(workload, init, data, args, t)}
    results = {s: [] for s in systems}
    for trial in range(args.trials):
        order = ["bellows", "pytorch"] if trial % 2 == 0 else ["pytorch", "bellows"]  # rounds 1, 3, ...: bellows first
        for s in order:
            results[s].append(systems[s](trial))
            print(f"  {workload} twin round {trial + 1}/{args.trials} {s:8s} {results[s][-1]['ms']:8.3f} ms/step", flush=True)
    row = {"workload": workload, "name": w.name, "batch_size": w.batch_size, "accumulation": w.accumulation,
           "bellows_overrides": w.bellows_overrides, "loss_agreement": worst,
           "bellows_ms": summary([t["ms"] for t in results["bellows"]]),
           "pytorch_ms": summary([t["ms"] for t in results["pytorch"]]),
           "pytorch_step_median_ms": summary([t["step_median_ms"] for t in results["pytorch"]]),
           "bellows_phases_ms": {p: statistics.median(t["phases_ms"][p] for t in results["bellows"]) for p in PHASES},
           "trials": results}
    row["bellows_over_pytorch"] = row["bellows_ms"]["median"] / row["pytorch_ms"]["median"]
    return row


def table(rows, args):
    def cell(s):
        return f"{s['median']:.3f} ({s['min']:.3f}-{s['max']:.3f})"

    head = ("| twin | bellows overrides | batch | loss agreement | bellows ms/step | PyTorch eager ms/step | bellows/PyTorch "
            "| PyTorch per-step median ms | bellows phases ms: forward / backward / optimizer / data+copy+other |")
    lines = [head, "|" + "---|" * (head.count("|") - 1)]
    for r in rows:
        p = r["bellows_phases_ms"]
        batch = f"{r['batch_size']} x {r['accumulation']}" if r["accumulation"] > 1 else str(r["batch_size"])
        lines.append(f"| {r['workload']} {r['name']} | `{' '.join(r['bellows_overrides'])}` | {batch} | {r['loss_agreement']:.1e} | "
                     f"{cell(r['bellows_ms'])} | {cell(r['pytorch_ms'])} | {r['bellows_over_pytorch']:.2f}x | "
                     f"{cell(r['pytorch_step_median_ms'])} | {p['forward']:.3f} / {p['backward']:.3f} / {p['optimizer']:.3f} / "
                     f"{p['data'] + p['copy'] + p['other']:.3f} |")
    note = (f"\nOne thread each; {args.steps} optimizer steps per run, the first {args.warmup} discarded; ms/step: the "
            f"median over the steady-state windows of {args.window} steps of the mean ms per optimizer step, then the "
            f"median (range) over {args.trials} alternating trials. bellows/PyTorch < 1: bellows is cheaper. "
            f"CPU: {cpu_model()}; torch {args.torch_version}.\n")
    return "\n".join(lines) + "\n" + note


def main():
    ap = argparse.ArgumentParser(description="host-bound twins: bellows vs PyTorch eager per-step host cost (issue 43)")
    ap.add_argument("workloads", nargs="*", help=f"of {' '.join(sorted(peer.TWINS))} (default: all)")
    ap.add_argument("--trials", type=int, default=3, help="alternating rounds (each: one bellows run, one peer run)")
    ap.add_argument("--steps", type=int, default=800, help="optimizer steps per run, warm-up included")
    ap.add_argument("--warmup", type=int, default=100, help="optimizer steps discarded first (a multiple of --window)")
    ap.add_argument("--window", type=int, default=10, help="bellows' train.log_every_n_steps; the peer's steps are "
                                                             "grouped the same way")
    ap.add_argument("--check-steps", type=int, default=10, help="steps whose losses must agree before any timing")
    ap.add_argument("--out", default=os.path.join(REPO, "build", "peers-twins"))
    ap.add_argument("--bin", default=os.path.join(REPO, "build", "bin"))
    ap.add_argument("--python", default=sys.executable)
    ap.add_argument("-v", "--verbose", action="store_true", help="print the agreement check's commands and losses")
    args = ap.parse_args()
    args.workloads = args.workloads or ["W1", "W3", "W4", "W5"]
    if set(args.workloads) - set(peer.TWINS):  # (not argparse's choices: Python 3.11 rejects an empty nargs="*" with them)
        ap.error(f"no host-bound twin for {' '.join(sorted(set(args.workloads) - set(peer.TWINS)))}")
    if args.warmup % args.window or args.steps % args.window or args.steps <= args.warmup:
        ap.error("--warmup and --steps must be multiples of --window, and --steps more than --warmup")
    for tool in ("bellows", "bellows_example_data"):
        if not os.access(os.path.join(args.bin, tool), os.X_OK):
            sys.exit(f"host_twins: {os.path.join(args.bin, tool)} is missing: build it first (this script does not build)")
    args.work = os.path.join(args.out, "work")
    args.data_root = os.path.join(args.out, "data-quick")
    os.makedirs(args.work, exist_ok=True)
    args.torch_version = subprocess.run([args.python, "-c", "import torch; print(torch.__version__)"], capture_output=True,
                                        text=True, check=True).stdout.strip()
    start, load_start = time.perf_counter(), os.getloadavg()
    rows = [bench(workload, args) for workload in args.workloads]
    payload = {"cpu": cpu_model(), "torch": args.torch_version, "threads": 1, "steps": args.steps, "warmup": args.warmup,
               "window": args.window, "trials": args.trials, "seconds": time.perf_counter() - start,
               "loadavg_start_end": [load_start, os.getloadavg()], "rows": rows}  # other load on the machine skews the times
    write_results(args.out, "bench/peers/host_twins.sh", payload, table(rows, args))
    return 0


if __name__ == "__main__":
    sys.exit(main())
