#!/usr/bin/env python3
"""kill -9 soak: a training job killed at random moments, resumed each time with resume=auto, ends with the
weights of a job that was never interrupted.

    python3 tests/reliability/kill_soak.py --bellows build/bin/bellows --kills 50 --steps 20000

1. A reference run trains the demo (or --config with --set overrides; fp32, one thread, deterministic) for --steps optimizer steps, uninterrupted.
2. The soak starts the same job with resume=auto and SIGKILLs it --kills times: half of the kills at a random
   moment of the process's life (start-up included), half as soon as the 1st to 3rd checkpoint write of that life
   has begun (a new .tmp-step directory appeared), so that many land inside a write. After every kill each checkpoint directory in the run
   is verified with `bellows ckpt inspect` (a complete-looking checkpoint that does not verify would be a defect).
3. The job then runs to its end; its final weights (the end checkpoint's model.safetensors) are compared byte for
   byte with the reference's, and so is the trainer state (state.bin: optimizer, schedule, RNG, data position).

Prints a summary and writes --json; exits 1 when a check fails. Standard library only.
"""
import argparse
import hashlib
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def job_args(bellows, out, steps, every, config=None, extra=()):
    return [str(bellows), "train", *([str(config)] if config else []), *extra, f"output_dir={out}", "name=soak", "precision=fp32", "threads=1", "deterministic=true",
            "data.workers=0", f"train.max_steps={steps}", "train.epochs=1000", "train.log_every_n_steps=100",
            f"checkpoint.every_n_steps={every}", "checkpoint.every_n_minutes=0", "checkpoint.keep_last=2",
            "log.tensorboard=false", "log.flops=false"]


def sha256(path):
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def final_files(run_dir, steps):
    ckpt = Path(run_dir) / "checkpoints" / f"step-{steps:09d}"
    return {name: sha256(ckpt / name) for name in ("model.safetensors", "state.bin")} if ckpt.is_dir() else None


def verify_all(bellows, ckpt_dir):
    """(verified, failed, half_written): complete checkpoint directories that verify or not, and .tmp leftovers."""
    verified = failed = half = 0
    failures = []
    if not ckpt_dir.is_dir():
        return verified, failed, half, failures
    for entry in sorted(ckpt_dir.iterdir()):
        if entry.name.startswith(".tmp") or entry.name.startswith(".old"):
            half += 1
            continue
        if not entry.name.startswith("step-"):
            continue
        r = subprocess.run([str(bellows), "ckpt", "inspect", str(entry)], capture_output=True, text=True)
        if r.returncode == 0:
            verified += 1
        else:
            failed += 1
            failures.append(f"{entry.name}: exit {r.returncode}: {r.stderr.strip()[:300]}")
    return verified, failed, half, failures


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--bellows", required=True, help="the bellows executable")
    ap.add_argument("--kills", type=int, default=50)
    ap.add_argument("--steps", type=int, default=20000, help="optimizer steps of the job")
    ap.add_argument("--every", type=int, default=50, help="checkpoint.every_n_steps")
    ap.add_argument("--max-delay", type=float, default=1.5, help="random kills: at most this many seconds after start")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json", help="write the summary here")
    ap.add_argument("--config", help="the job's config file (default: the embedded demo)")
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="more overrides of the job (repeatable)")
    ap.add_argument("--keep", action="store_true", help="keep the run directories")
    a = ap.parse_args()
    rng = random.Random(a.seed)
    work = Path(tempfile.mkdtemp(prefix="bellows-soak-"))
    env = dict(os.environ, KINETO_LOG_LEVEL="6")
    t0 = time.time()

    # --- 1. the reference, uninterrupted ---
    ref = subprocess.run(job_args(a.bellows, work / "reference", a.steps, a.every, a.config, a.set), capture_output=True, text=True, env=env)
    if ref.returncode != 0:
        sys.exit(f"the reference run failed ({ref.returncode}): {ref.stderr[-2000:]}")
    reference = final_files(work / "reference" / "soak", a.steps)
    ref_s = time.time() - t0

    # --- 2. the soak: kill, verify, resume ---
    run_dir = work / "soaked" / "soak"
    ckpt_dir = run_dir / "checkpoints"
    args = job_args(a.bellows, work / "soaked", a.steps, a.every, a.config, a.set) + ["resume=auto"]
    # Random kills come within delay_cap of a start: together they cover at most half of the reference's time, so
    # the job cannot finish before its last kill on a faster machine either.
    delay_cap = min(a.max_delay, 0.5 * ref_s / max(1, (a.kills + 1) // 2))
    kills = in_write = finished_early = 0
    verified = failed = half_written = 0
    failures, skipped_notes, resumed_from = [], 0, 0
    while kills < a.kills:
        def writes():  # the checkpoint writes under way or abandoned (their temporary directories)
            return {e.name for e in ckpt_dir.iterdir() if e.name.startswith(".tmp-step")} if ckpt_dir.is_dir() else set()
        before = writes()  # a dead writer's leftovers from an earlier kill do not count
        log = open(work / "soak.log", "a")
        p = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT, env=env)
        # Every other kill waits for the 1st to 3rd checkpoint write of this life to begin (so that the job makes
        # progress between kills) and lands inside it.
        targeted = kills % 2 == 1
        target_write = rng.randint(1, 3)
        seen = set()
        deadline = time.time() + (60 if targeted else rng.uniform(0.05, delay_cap))
        while p.poll() is None and time.time() < deadline:
            if targeted:
                seen |= writes() - before
                if len(seen) >= target_write:
                    time.sleep(rng.uniform(0, 0.004))  # somewhere inside the write
                    break
            time.sleep(0.001)
        if p.poll() is not None:  # it finished before the kill: the job is shorter than the soak
            finished_early = 1
            log.close()
            break
        p.send_signal(signal.SIGKILL)
        p.wait()
        log.close()
        kills += 1
        if writes() - before:
            in_write += 1
        v, f, h, why = verify_all(a.bellows, ckpt_dir)
        verified += v
        failed += f
        half_written += h
        failures += why
    # --- 3. to the end ---
    last = subprocess.run(args, capture_output=True, text=True, env=env)
    text = (work / "soak.log").read_text(errors="replace") + last.stdout + last.stderr
    resumed_from = text.count("resumed from")
    skipped_notes = text.count("warning: skipped checkpoint")  # complete-looking ones passed over on resume
    soaked = final_files(run_dir, a.steps) if last.returncode == 0 else None
    equal = soaked is not None and soaked == reference
    summary = {
        "kills": kills, "requested_kills": a.kills, "kills_inside_a_checkpoint_write": in_write,
        "resumed_runs": resumed_from, "final_run_exit": last.returncode, "finished_before_all_kills": bool(finished_early),
        "checkpoints_verified_after_kills": verified, "checkpoints_that_did_not_verify": failed,
        "half_written_left_by_kills": half_written, "skip_messages_on_resume": skipped_notes,
        "bitwise_equal_to_uninterrupted": equal, "reference": reference, "soaked": soaked,
        "steps": a.steps, "checkpoint_every_n_steps": a.every, "reference_seconds": round(ref_s, 1),
        "random_kill_within_seconds": round(delay_cap, 3),
        "total_seconds": round(time.time() - t0, 1), "failures": failures[:20],
    }
    print(f"kill -9 soak: {kills}/{a.kills} kills ({in_write} inside a checkpoint write), {resumed_from} resumed runs, "
          f"final run exit {last.returncode}")
    print(f"  checkpoints verified after kills: {verified}; that did not verify: {failed}; half-written left by kills: "
          f"{half_written} (never loaded: resume skips them)")
    print(f"  final weights and trainer state bitwise equal to the uninterrupted run: {'yes' if equal else 'NO'}")
    print(f"  {a.steps} steps, checkpoint every {a.every}; {summary['total_seconds']} s in all")
    if a.json:
        Path(a.json).write_text(json.dumps(summary, indent=2) + "\n")
    ok = kills == a.kills and failed == 0 and equal and last.returncode == 0
    if not ok:
        print(f"FAILED; runs kept in {work}", file=sys.stderr)
        for line in failures[:10]:
            print(f"  {line}", file=sys.stderr)
        if last.returncode != 0:
            print(last.stderr[-2000:], file=sys.stderr)
    elif not a.keep:
        shutil.rmtree(work, ignore_errors=True)
    print(f"{1 if ok else 0} passed, {0 if ok else 1} failed")
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
