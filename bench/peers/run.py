"""bellows side by side with PyTorch eager and torch.compile on the reference workloads (bench/peers/run.sh runs
this after building bellows; see docs/benchmarks.md).

Per workload and precision:
  1. the example's data (build/bin/bellows_example_data; --quick: the examples' small data), and one initial-weights
     file written by the PyTorch peer (peer.py --write-init) that every system starts from;
  2. check.py's agreement test: bellows and eager PyTorch train 10 steps from those weights on the same batches, and
     their per-step losses must agree within the precision's tolerance, else the suite stops and says so;
  3. trials, alternating the systems (A B C [D], then B C [D] A, ...): bellows (`bellows train`, its own plan for
     workers and allocator, the example's config with a constant LR, no evaluation, no checkpoints), PyTorch eager,
     torch.compile, and for W1/W3/W5 the bare LibTorch loop over the same model (build/bin/bellows_bare_loop); warm-up
     steps are discarded;
  4. per system the median samples/s and the range over trials; bellows/eager, bellows/compile, bellows' MFU
     (FLOPs per sample from peer.py x samples/s over the GEMM ceiling `bellows hw --measure` measured for the
     precision), bellows' cost over the bare loop, and the seconds each process spent outside its timed steps
     (start-up; for torch.compile the compilation, also reported on its own).
Results: OUT/results.json, OUT/results.md (the table docs/benchmarks.md shows), OUT/hw.txt.
"""
import argparse
import json
import os
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

BARE = {"W1", "W3", "W5"}  # the workloads the bare LibTorch loop runs (issue 13: bellows' per-step machinery)
# (warm-up, timed) optimizer steps per trial: about 3-10 s of timed steps each on 2 cores (W3: ~0.85 s a step).
STEPS = {"W1": (20, 300), "W2": (10, 100), "W3": (3, 12), "W4": (3, 12), "W5": (20, 400), "W6": (3, 15), "W7": (5, 40)}


def run(cmd, log):
    """Runs cmd with output to log; returns its wall seconds; stops the suite naming the log when it fails."""
    start = time.perf_counter()
    with open(log, "w") as f:
        done = subprocess.run(cmd, cwd=REPO, stdout=f, stderr=subprocess.STDOUT)
    wall = time.perf_counter() - start
    if done.returncode != 0:
        with open(log) as f:
            tail = f.read()[-3000:]
        sys.exit(f"run: FAILED (exit {done.returncode}): {' '.join(cmd)}\n--- {log} (tail) ---\n{tail}")
    return wall


def ceilings(args):
    """GFLOP/s per precision from `bellows hw --json --measure --seconds 2` (measured once, before any trial); the
    text report with these peaks goes to OUT/hw.txt."""
    bellows = os.path.join(args.bin, "bellows")
    doc = json.loads(subprocess.run([bellows, "hw", "--json", "--measure", "--seconds", "2"], capture_output=True, text=True,
                                    check=True).stdout)
    text = subprocess.run([bellows, "hw"], capture_output=True, text=True, check=True).stdout
    measured = "".join(f"  {p['name']:<18} {p['value']:>10.1f} {p['unit']:<8} on {p['device']}\n                 method: {p['method']}\n"
                       for p in doc["peaks"])
    with open(os.path.join(args.out, "hw.txt"), "w") as f:
        f.write(text + "\nMeasured peaks (bellows hw --measure --seconds 2)\n" + measured)
    peaks = {p["name"]: p for p in doc["peaks"] if p["device"] == "cpu"}
    out = {"fp32": peaks["matmul_fp32"]["value"]}
    if peaks.get("matmul_bf16", {}).get("supported", False) and peaks["matmul_bf16"]["value"] > 0:
        out["bf16-mixed"] = peaks["matmul_bf16"]["value"]
    return out, doc


def data_for(workload, args):
    example, file = check.EXAMPLES[workload]
    folder = os.path.join(args.data_root, example)
    if not os.path.exists(os.path.join(folder, file)):
        run([os.path.join(args.bin, "bellows_example_data"), example, folder, *(["--quick"] if args.quick else [])],
            os.path.join(args.work, f"data-{example}.log"))
    return os.path.join(folder, file)


# --scripted: the workload's model as a user's TorchScript file (peer.py --write-script) under model.name:
# torchscript, with the data, optimizer and schedule keys of the workload's config (examples/temporal/*.yaml).
SCRIPTED_DATA = {
    "W1": {"source": "csv", "csv": {"targets": ["y"]}},
    "W3": {"source": "npy", "window": {"length": 128, "stride": 1, "horizon": 4, "target_columns": [0, 1, 2, 3]}},
}


def scripted_config(workload, args, jit_optimize):
    """A config file (JSON, which is YAML) for the workload's scripted model; its path."""
    w = peer.WORKLOADS[workload]
    script = os.path.join(args.work, f"{workload}-model.pt")
    if not os.path.exists(script):
        run([args.python, os.path.join(HERE, "peer.py"), "--workload", workload, "--data", data_for(workload, args),
             "--write-script", script], os.path.join(args.work, f"{workload}-script.log"))
    config = {"name": f"{workload}-scripted", "seed": 0, "data": dict(SCRIPTED_DATA[workload]),
              "model": {"name": "torchscript", "path": script, "task": w.kind, "jit_optimize": jit_optimize},
              "optim": {"type": "adamw", "lr": w.lr, "weight_decay": w.weight_decay}}
    path = os.path.join(args.work, f"{workload}-scripted{'-opt' if jit_optimize else ''}.yaml")
    with open(path, "w") as f:
        json.dump(config, f)
    return path


def bellows_trial(workload, precision, init, data, args, trial, bin_dir=None, tag="", config=None, extra=()):
    w = peer.WORKLOADS[workload]
    out = os.path.join(args.work, "runs")
    name = f"{workload}-{precision}{tag}-t{trial}"
    shutil.rmtree(os.path.join(out, name), ignore_errors=True)
    batch = args.batch_size or w.batch_size
    cmd = [os.path.join(bin_dir or args.bin, "bellows"), "train", config or os.path.join(REPO, w.config), f"output_dir={out}", f"name={name}",
           f"data.path={data}", "data.shuffle=false", "data.val_fraction=0", f"data.batch_size={batch}",
           f"train.max_steps={args.warmup + args.steps}", "train.epochs=1000", f"train.log_every_n_steps={args.warmup}",
           "train.eval_every_n_steps=0", "checkpoint.enabled=false", f"threads={args.threads}", f"precision={precision}",
           "schedule.type=constant", "schedule.warmup_steps=0", f"init_weights={init}", *(w.bellows_overrides if not config else []), *extra]
    wall = run(cmd, os.path.join(args.work, f"{name}.log"))
    records = [json.loads(line) for line in open(os.path.join(out, name, "metrics.jsonl"))]
    train = {r["step"]: r for r in records if r.get("type") == "train"}
    a, b = train[args.warmup], train[args.warmup + args.steps]
    seconds = b["elapsed_s"] - a["elapsed_s"]
    per_step = batch * w.accumulation
    return {"samples_per_s": args.steps * per_step / seconds, "step_ms": 1e3 * seconds / args.steps,
            "outside_steps_s": wall - seconds * (args.warmup + args.steps) / args.steps, "wall_s": wall,
            "loss": b["loss"]}


def peer_trial(workload, precision, init, data, args, trial, mode):
    out = os.path.join(args.work, f"{workload}-{precision}-{mode}-t{trial}.json")
    cmd = [args.python, os.path.join(HERE, "peer.py"), "--workload", workload, "--data", data, "--init", init,
           "--steps", str(args.steps), "--warmup", str(args.warmup), "--mode", mode, "--precision", precision,
           "--threads", str(args.threads), "--json", out, *(["--batch-size", str(args.batch_size)] if args.batch_size else [])]
    wall = run(cmd, out.replace(".json", ".log"))
    with open(out) as f:
        j = json.load(f)
    return {"samples_per_s": j["samples_per_s"], "step_ms": j["step_ms"], "wall_s": wall,
            "outside_steps_s": wall - j["step_ms"] / 1e3 * (args.warmup + args.steps),
            "first_step_s": j["first_step_s"], "flops_per_sample": j["flops_per_sample"], "loss": j["losses"][-1]}


def bare_trial(workload, precision, init, data, args, trial):
    w = peer.WORKLOADS[workload]
    out = os.path.join(args.work, f"{workload}-{precision}-bare-t{trial}.json")
    batch = args.batch_size or w.batch_size
    cmd = [os.path.join(args.bin, "bellows_bare_loop"), os.path.join(REPO, w.config), f"data.path={data}",
           "data.val_fraction=0", f"data.batch_size={batch}", f"threads={args.threads}", f"precision={precision}",
           f"init_weights={init}", *w.bellows_overrides, "--steps", str(args.steps), "--warmup", str(args.warmup),
           "--json", out]
    wall = run(cmd, out.replace(".json", ".log"))
    with open(out) as f:
        j = json.load(f)
    return {"samples_per_s": j["samples_per_s"], "step_ms": j["step_ms"], "wall_s": wall,
            "outside_steps_s": wall - j["step_ms"] / 1e3 * (args.warmup + args.steps), "loss": j["losses"][-1]}


def summary(trials, key="samples_per_s"):
    values = [t[key] for t in trials]
    return {"median": statistics.median(values), "min": min(values), "max": max(values), "trials": values}


def bench(workload, precision, args, peaks):
    default_warmup, default_steps = STEPS[workload]
    args = argparse.Namespace(**vars(args))
    args.warmup = args.warmup or default_warmup
    args.steps = args.steps or default_steps
    if args.batch_size and workload == "W5" and args.batch_size < 64:
        args.steps *= 4  # W5 at batch 16: steps of ~1 ms
    if args.steps % args.warmup:
        args.steps += args.warmup - args.steps % args.warmup  # bellows logs every `warmup` steps
    data = data_for(workload, args)
    if workload == "W7":
        check.ensure_vocabulary(data, args)
    check_args = argparse.Namespace(**vars(args))
    check_args.steps = args.check_steps
    ok, worst = check.check(workload, precision, check_args)  # writes <work>/<workload>-init.safetensors
    if not ok:
        sys.exit(f"run: {workload} {precision}: bellows and PyTorch disagree (above); no timing is reported for systems "
                 "that compute different things")
    init = os.path.join(args.work, f"{workload}-init.safetensors")
    systems = {"bellows": lambda t: bellows_trial(workload, precision, init, data, args, t),
               "eager": lambda t: peer_trial(workload, precision, init, data, args, t, "eager")}
    if not args.no_compile:
        systems["compile"] = lambda t: peer_trial(workload, precision, init, data, args, t, "compile")
    if args.baseline_bin:
        systems["before"] = lambda t: bellows_trial(workload, precision, init, data, args, t, args.baseline_bin, "-before")
    if workload in BARE:
        systems["bare"] = lambda t: bare_trial(workload, precision, init, data, args, t)
    if args.scripted and workload in SCRIPTED_DATA:
        for opt in (False, True):
            cfg = scripted_config(workload, args, opt)
            label = "scripted-opt" if opt else "scripted"
            systems[label] = (lambda c, lab: lambda t: bellows_trial(workload, precision, init, data, args, t, tag="-" + lab, config=c))(cfg, label)
        if workload == "W3":  # the built-in model with ATen's dropout draws, as the scripted model (and PyTorch) make them
            systems["torch-masks"] = lambda t: bellows_trial(workload, precision, init, data, args, t, tag="-torch-masks",
                                                             extra=["dropout_masks=torch"])
    order = list(systems)
    results = {s: [] for s in order}
    for trial in range(args.trials):
        rotated = order[trial % len(order):] + order[:trial % len(order)]
        for s in rotated:
            results[s].append(systems[s](trial))
            print(f"  {workload} {precision} trial {trial + 1}/{args.trials} {s:8s} "
                  f"{results[s][-1]['samples_per_s']:10.1f} samples/s  step {results[s][-1]['step_ms']:8.2f} ms", flush=True)
    row = {"workload": workload, "name": peer.WORKLOADS[workload].name, "precision": precision,
           "batch_size": args.batch_size or peer.WORKLOADS[workload].batch_size, "loss_agreement": worst, "systems": {}}
    for s, trials in results.items():
        row["systems"][s] = {"samples_per_s": summary(trials), "step_ms": summary(trials, "step_ms"),
                             "outside_steps_s": summary(trials, "outside_steps_s")}
    b = row["systems"]["bellows"]["samples_per_s"]["median"]
    row["bellows_over_eager"] = b / row["systems"]["eager"]["samples_per_s"]["median"]
    if "compile" in results:
        row["bellows_over_compile"] = b / row["systems"]["compile"]["samples_per_s"]["median"]
        eager_step_s = row["systems"]["eager"]["step_ms"]["median"] / 1e3
        row["compile_s"] = statistics.median(t["first_step_s"] - eager_step_s for t in results["compile"])
    if "before" in results:
        row["bellows_over_before"] = b / row["systems"]["before"]["samples_per_s"]["median"]
    for label in ("scripted", "scripted-opt"):
        if label in results:
            row[f"{label}_over_bellows"] = row["systems"][label]["samples_per_s"]["median"] / b
            row[f"{label}_over_eager"] = row["systems"][label]["samples_per_s"]["median"] / row["systems"]["eager"]["samples_per_s"]["median"]
            # Its last logged loss (the mean over the last logging window, as bellows logs it) against the built-in
            # model's: the same weights and batches. With dropout (W3) the draws differ: the built-in model draws
            # its own masks (torch-masks: ATen's), and the peer consumed the generator for its initialisation,
            # which a scripted model loaded from a file does not.
            reference = results["torch-masks"] if "torch-masks" in results else results["bellows"]
            row[f"{label}_loss_difference"] = max(abs(s["loss"] - t["loss"]) / max(abs(t["loss"]), 1e-30)
                                                  for s, t in zip(results[label], reference))
    if "bare" in results:
        row["machinery_cost"] = row["systems"]["bare"]["samples_per_s"]["median"] / b - 1
    flops = results["eager"][0]["flops_per_sample"]
    row["flops_per_sample"] = flops
    if precision in peaks and flops:
        row["bellows_mfu"] = flops * b / (peaks[precision] * 1e9)
        row["ceiling_gflops"] = peaks[precision]
    return row


def fmt_system(row, s):
    if s not in row["systems"]:
        return "-"
    v = row["systems"][s]["samples_per_s"]
    return f"{v['median']:.0f} ({v['min']:.0f}-{v['max']:.0f})"


def table(rows):
    head = ("| workload | precision | batch | loss agreement | bellows samples/s | eager | torch.compile | bare loop "
            "| bellows/eager | bellows/compile | bellows before | now/before | machinery cost | bellows MFU | compile s | outside steps s: bellows / eager / compile |")
    lines = [head, "|" + "---|" * (head.count("|") - 1)]
    for r in rows:
        outside = " / ".join(f"{r['systems'][s]['outside_steps_s']['median']:.1f}" if s in r["systems"] else "-"
                             for s in ("bellows", "eager", "compile"))
        lines.append(
            f"| {r['workload']} {r['name']} | {r['precision']} | {r['batch_size']} | {r['loss_agreement']:.1e} | "
            f"{fmt_system(r, 'bellows')} | {fmt_system(r, 'eager')} | {fmt_system(r, 'compile')} | {fmt_system(r, 'bare')} | "
            f"{r['bellows_over_eager']:.2f}x | {('%.2fx' % r['bellows_over_compile']) if 'bellows_over_compile' in r else '-'} | "
            f"{fmt_system(r, 'before')} | {('%.2fx' % r['bellows_over_before']) if 'bellows_over_before' in r else '-'} | "
            f"{('%+.1f%%' % (100 * r['machinery_cost'])) if 'machinery_cost' in r else '-'} | "
            f"{('%.0f%%' % (100 * r['bellows_mfu'])) if 'bellows_mfu' in r else '-'} | "
            f"{('%.1f' % r['compile_s']) if 'compile_s' in r else '-'} | {outside} |")
    scripted = [r for r in rows if "scripted" in r["systems"]]
    if scripted:
        head = ("| workload | precision | built-in | built-in, dropout_masks=torch | scripted | scripted, jit_optimize | eager "
                "| torch.compile | scripted/built-in | scripted/built-in with torch masks | scripted/eager | jit_optimize/off "
                "| last logged loss vs built-in (relative): scripted / jit_optimize |")
        lines += ["", head, "|" + "---|" * (head.count("|") - 1)]
        for r in scripted:
            opt = r["systems"].get("scripted-opt")
            lines.append(
                f"| {r['workload']} {r['name']} | {r['precision']} | {fmt_system(r, 'bellows')} | {fmt_system(r, 'torch-masks')} | "
                f"{fmt_system(r, 'scripted')} | {fmt_system(r, 'scripted-opt')} | {fmt_system(r, 'eager')} | {fmt_system(r, 'compile')} | "
                f"{r['scripted_over_bellows']:.3f}x | "
                f"{(r['systems']['scripted']['samples_per_s']['median'] / r['systems']['torch-masks']['samples_per_s']['median']) if 'torch-masks' in r['systems'] else float('nan'):.3f}x | "
                f"{r['scripted_over_eager']:.3f}x | "
                f"{(r['scripted-opt_over_bellows'] / r['scripted_over_bellows']) if opt else float('nan'):.3f}x | "
                f"{r['scripted_loss_difference']:.1e} / {r.get('scripted-opt_loss_difference', float('nan')):.1e} |")
    return "\n".join(lines) + "\n"


def main():
    ap = argparse.ArgumentParser(description="bellows vs PyTorch eager and torch.compile, side by side")
    ap.add_argument("workloads", nargs="*", default=["W1", "W2", "W3", "W4", "W5"], choices=sorted(peer.WORKLOADS))
    ap.add_argument("--precision", action="append", choices=sorted(check.TOLERANCE), help="repeatable; default fp32")
    ap.add_argument("--trials", type=int, default=3)
    ap.add_argument("--steps", type=int, default=0, help="timed optimizer steps per trial (default: per workload, STEPS)")
    ap.add_argument("--warmup", type=int, default=0, help="optimizer steps discarded first; bellows logs every this many")
    ap.add_argument("--batch-size", type=int, default=0, help="override the workload's batch size (e.g. W5 at 16)")
    ap.add_argument("--check-steps", type=int, default=10, help="steps whose losses must agree before any timing")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--quick", action="store_true", help="the examples' small data (a smoke run, not a measurement)")
    ap.add_argument("--no-compile", action="store_true", help="leave torch.compile out")
    ap.add_argument("--scripted", action="store_true",
                    help="W1/W3: also time the model as a user's TorchScript file (model.name: torchscript), with the graph "
                         "executor's optimisation off (scripted) and on (scripted-opt)")
    ap.add_argument("--baseline-bin", help="also time the bellows CLI in this folder (an earlier build) as 'before'")
    ap.add_argument("--out", default=os.path.join(REPO, "build", "peers"))
    ap.add_argument("--bin", default=os.path.join(REPO, "build", "bin"))
    ap.add_argument("--python", default=sys.executable)
    args = ap.parse_args()
    if args.trials < 3 and not args.quick:
        sys.exit("run: at least 3 trials (the median and range mean little with fewer); --quick for a smoke run")
    args.work = os.path.join(args.out, "work")
    args.data_root = os.path.join(args.out, "data-quick" if args.quick else "data")
    # check.py's options
    args.tolerance, args.cpp_linear, args.unfreeze_encoder, args.verbose = 0.0, False, False, False
    os.makedirs(args.work, exist_ok=True)
    peaks, hw = ceilings(args)
    rows = []
    for workload in args.workloads:
        for precision in args.precision or ["fp32"]:
            if precision == "bf16-mixed" and precision not in peaks:
                print(f"run: {workload} bf16-mixed left out: this CPU has no bf16 hardware (`bellows hw --measure`)")
                continue
            rows.append(bench(workload, precision, args, peaks))
    write_results(args.out, "bench/peers/run.sh", {"peaks_gflops": peaks, "cpu": hw["cpu"], "rows": rows}, table(rows), "hw.txt")
    return 0


def write_results(out, script, payload, text, *extra_files):
    """OUT/results.json (the payload and the command) and OUT/results.md (the command and the table); prints both."""
    cmd = " ".join([script, *sys.argv[1:]])
    with open(os.path.join(out, "results.json"), "w") as f:
        json.dump({"command": cmd, **payload}, f, indent=1)
    with open(os.path.join(out, "results.md"), "w") as f:
        f.write(f"`{cmd}`\n\n{text}")
    print(f"\n{text}\nresults: {out}/" + ", ".join(["results.md", "results.json", *extra_files]))


if __name__ == "__main__":
    sys.exit(main())
