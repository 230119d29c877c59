# Checks that bellows and the PyTorch peer (bench/peers/peer.py) compute the same thing: both start from one
# initial-weights file (written by the peer), train N steps on the same batches, and their per-step losses must
# agree within the precision's tolerance (fp32 1e-5 relative, bf16-mixed 1e-2). Exits 1 naming the workload,
# the step and both values at the first disagreement, 2 when a run fails.
#   check.py W1 W3 W5 [--precision fp32 --precision bf16-mixed] [--steps 10] [--threads 2] [--data-root DIR]
#   check.py W1 W3 W4 W5 --twin    the host-bound twins (peer.py TWINS: the peer's --twin, bellows with their overrides)
# Without --data-root the examples' --quick data is generated (build/bin/bellows_example_data) under --work.
import argparse
import json
import os
import shutil
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)
import peer  # noqa: E402  (the workloads' configs; importing it builds nothing)

# Per workload: the example that generates its data and the data file (or folder) inside that example's folder.
EXAMPLES = {
    "W1": ("temporal", "features.csv"),
    "W2": ("temporal", "series.npy"),
    "W3": ("temporal", "series.npy"),
    "W4": ("cape-resnet", "train"),
    "W5": ("icon-diffusion", "train.npz"),
    "W6": ("weather-gnn", "regional_weather.nc"),
    "W7": ("nli-encoder", "train.tsv"),
}
TOLERANCE = {"fp32": 1e-5, "bf16-mixed": 1e-2}


def run(cmd, log, cwd=REPO):
    with open(log, "w") as f:
        done = subprocess.run(cmd, cwd=cwd, stdout=f, stderr=subprocess.STDOUT)
    if done.returncode != 0:
        with open(log) as f:
            tail = f.read()[-3000:]
        print(f"check: FAILED to run (exit {done.returncode}): {' '.join(cmd)}\n--- {log} (tail) ---\n{tail}", file=sys.stderr)
        sys.exit(2)


def data_path(workload, args):
    example, file = EXAMPLES[workload]
    if args.data_root:
        return os.path.join(args.data_root, example, file)
    folder = os.path.join(args.work, "data", example + "-quick")
    if not os.path.exists(os.path.join(folder, file)):
        run([os.path.join(args.bin, "bellows_example_data"), example, folder, "--quick"],
            os.path.join(args.work, f"data-{example}.log"))
    return os.path.join(folder, file)


def torch_masks(args):
    """dropout_masks=torch where this bellows has the key: PyTorch's own dropout draws, so W3/W7 compare bitwise
    (bellows' default draws its masks in parallel from another generator; same statistics, other numbers)."""
    if not hasattr(torch_masks, "args"):
        keys = subprocess.run([os.path.join(args.bin, "bellows"), "config", "keys"], capture_output=True, text=True)
        torch_masks.args = ["dropout_masks=torch"] if "dropout_masks " in keys.stdout else []
    return torch_masks.args


def twin(args):
    return getattr(args, "twin", False)  # run.py passes its own namespace, which has no --twin


def workload_of(workload, args):
    """The peer's Workload: the example's, or with --twin its host-bound twin."""
    return (peer.TWINS if twin(args) else peer.WORKLOADS)[workload]


def init_path(workload, args):
    """The initial-weights file check() writes (run.py and host_twins.py start their trials from it)."""
    return os.path.join(args.work, f"{workload}{'-twin' if twin(args) else ''}-init.safetensors")


def bellows_losses(workload, precision, init, data, args, tag):
    w = workload_of(workload, args)
    out = os.path.join(args.work, "runs")
    name = f"{workload}-{precision}-{tag}"
    shutil.rmtree(os.path.join(out, name), ignore_errors=True)
    cmd = [os.path.join(args.bin, "bellows"), "train", os.path.join(REPO, w.config),
           f"output_dir={out}", f"name={name}", f"data.path={data}", "data.shuffle=false", "data.val_fraction=0",
           f"train.max_steps={args.steps}", "train.epochs=1000", "train.log_every_n_steps=1",
           "checkpoint.enabled=false", f"threads={args.threads}", f"precision={precision}",
           "schedule.type=constant", "schedule.warmup_steps=0", f"init_weights={init}", *torch_masks(args),
           *w.bellows_overrides, *(["model.freeze_encoder=false"] if args.unfreeze_encoder else [])]
    run(cmd, os.path.join(args.work, f"{name}.log"))
    records = [json.loads(line) for line in open(os.path.join(out, name, "metrics.jsonl"))]
    steps = {r["step"]: r["loss"] for r in records if r.get("type") == "train"}
    missing = [s for s in range(1, args.steps + 1) if s not in steps]
    if missing:
        print(f"check: {workload} {precision}: bellows logged no train record for steps {missing} "
              f"({os.path.join(out, name, 'metrics.jsonl')})", file=sys.stderr)
        sys.exit(2)
    return [steps[s] for s in range(1, args.steps + 1)], " ".join(cmd)


def peer_losses(workload, precision, init, data, args, tag):
    out = os.path.join(args.work, f"{workload}-{precision}-{tag}-peer.json")
    cmd = [args.python, os.path.join(HERE, "peer.py"), "--workload", workload, "--data", data, "--init", init,
           "--steps", str(args.steps), "--warmup", "0", "--mode", "eager", "--precision", precision,
           "--threads", str(args.threads), "--json", out, *peer_flags(args)]
    run(cmd, os.path.join(args.work, f"{workload}-{precision}-{tag}-peer.log"))
    with open(out) as f:
        return json.load(f)["losses"], " ".join(cmd)


def peer_flags(args):
    return [*(["--cpp-linear"] if args.cpp_linear else []), *(["--unfreeze-encoder"] if args.unfreeze_encoder else []),
            *(["--twin"] if twin(args) else [])]


def rel(a, b):
    return abs(a - b) / max(abs(a), abs(b), 1e-30)


def ensure_vocabulary(data, args):
    """W7: the peer reads the SentencePiece vocabulary bellows trains on the data and caches beside it
    (<file>.spm-bpe-512.model); a one-step bellows run makes it when it is not there yet."""
    if os.path.exists(f"{data}.spm-bpe-512.model"):
        return
    out = os.path.join(args.work, "runs")
    shutil.rmtree(os.path.join(out, "W7-vocabulary"), ignore_errors=True)
    run([os.path.join(args.bin, "bellows"), "train", os.path.join(REPO, peer.WORKLOADS["W7"].config), f"output_dir={out}",
         "name=W7-vocabulary", f"data.path={data}", "data.val_fraction=0", "train.max_steps=1", "checkpoint.enabled=false"],
        os.path.join(args.work, "W7-vocabulary.log"))


def check(workload, precision, args):
    data = data_path(workload, args)
    if workload == "W7":
        ensure_vocabulary(data, args)
    tag = "check-twin" if twin(args) else "check"
    init = init_path(workload, args)
    run([args.python, os.path.join(HERE, "peer.py"), "--workload", workload, "--data", data, "--write-init", init,
         *peer_flags(args)],
        os.path.join(args.work, f"{workload}{'-twin' if twin(args) else ''}-init.log"))
    ours, bellows_cmd = bellows_losses(workload, precision, init, data, args, tag)
    theirs, peer_cmd = peer_losses(workload, precision, init, data, args, tag)
    tol = args.tolerance or TOLERANCE[precision]
    worst = max(rel(a, b) for a, b in zip(ours, theirs))
    print(f"{workload}{' twin' if twin(args) else ''} {precision} ({args.steps} steps, {args.threads} threads"
          f"{', cpp-linear' if args.cpp_linear else ''}): "
          f"max relative difference "
          f"{worst:.3g} (tolerance {tol:g})", flush=True)
    if args.verbose:
        print(f"  bellows: {bellows_cmd}\n  peer:    {peer_cmd}")
        for s, (a, b) in enumerate(zip(ours, theirs), 1):
            print(f"  step {s:3d}  bellows {a:.9g}  pytorch {b:.9g}  rel {rel(a, b):.3g}")
    for s, (a, b) in enumerate(zip(ours, theirs), 1):
        if not rel(a, b) <= tol:
            print(f"check: {workload} {precision}: losses disagree at step {s}: bellows {a!r}, pytorch {b!r} "
                  f"(relative difference {rel(a, b):.3g} > {tol:g})", file=sys.stderr)
            return False, worst
    return True, worst


def main():
    ap = argparse.ArgumentParser(description="per-step loss agreement of bellows and the PyTorch peer")
    ap.add_argument("workloads", nargs="+", choices=sorted(peer.WORKLOADS))
    ap.add_argument("--precision", action="append", choices=sorted(TOLERANCE),
                    help="repeatable; default fp32")
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--tolerance", type=float, default=0.0, help="relative; default: by precision")
    ap.add_argument("--data-root", help="folder with one subfolder per example's data (default: generate --quick)")
    ap.add_argument("--work", default="/tmp/bellows-peers-check")
    ap.add_argument("--bin", default=os.path.join(REPO, "build", "bin"))
    ap.add_argument("--python", default=sys.executable)
    ap.add_argument("--cpp-linear", action="store_true",
                    help="run the peer with LibTorch's torch::nn::Linear forward: for bellows builds before commit "
                         "ed3a21b, whose models used it (see peer.py CppLinear)")
    ap.add_argument("--unfreeze-encoder", action="store_true", help="W7: train the encoder too")
    ap.add_argument("--twin", action="store_true", help="the host-bound twins (peer.py TWINS: W1, W3, W4, W5)")
    ap.add_argument("-v", "--verbose", action="store_true", help="print the commands and every step's losses")
    args = ap.parse_args()
    if args.twin and set(args.workloads) - set(peer.TWINS):
        ap.error(f"--twin: no host-bound twin for {', '.join(sorted(set(args.workloads) - set(peer.TWINS)))}")
    os.makedirs(args.work, exist_ok=True)
    failed = []
    for workload in args.workloads:
        for precision in args.precision or ["fp32"]:
            ok, _ = check(workload, precision, args)
            if not ok:
                failed.append(f"{workload} {precision}")
    if failed:
        print(f"check: FAILED: {', '.join(failed)}", file=sys.stderr)
        return 1
    print("check: all agree")
    return 0


if __name__ == "__main__":
    sys.exit(main())
