#!/usr/bin/env python3
"""kill -9 soak: a training job killed at random moments, resumed each time with resume=auto, ends with the
weights of a job that was never interrupted.

    python3 tests/reliability/kill_soak.py --bellows build/bin/bellows --kills 50 --steps 20000
    python3 tests/reliability/kill_soak.py --bellows build/bin/bellows --ranks 2 --strategy zero2 --kills 20 --steps 2000 --every 10

1. A reference run trains the demo (or --config with --set overrides; fp32, one thread, deterministic) for --steps optimizer steps, uninterrupted.
2. The soak starts the same job with resume=auto and SIGKILLs it --kills times: half of the kills at a random
   moment of the process's life (start-up included), half as soon as the 1st to 3rd checkpoint write of that life
   has begun (a new .tmp-step directory appeared), so that many land inside a write. After every kill each checkpoint directory in the run
   is verified with `bellows ckpt inspect` (a complete-looking checkpoint that does not verify would be a defect),
   and the next life must resume from the newest of those that verified (or start afresh when none did).
3. The job then runs to its end; its final weights (the end checkpoint's model.safetensors) are compared byte for
   byte with the reference's, and so is the trainer state (state.bin: optimizer, schedule, RNG, data position).

With --ranks N (N > 1) the job is `bellows launch -n N -- train ... dist.strategy=S` (--strategy: zero1, zero2 or
fsdp write sharded checkpoints, each rank its shard-0000r-of-0000N.safetensors, rank 0 the manifest last) on the
96-row CSV of tests/e2e/dist_cli_test.cpp (written into the work directory; an MLP of 4 -> 16 -> 1 unless --config
names a model, e.g. tests/reliability/soak_transformer.yaml for fsdp). Each kill is SIGKILL of one rank chosen at
random (found as a child of the launcher by its RANK); the surviving ranks must then stop, with an error when their
collective fails or quietly at the launcher's SIGTERM in start-up, within dist.timeout_s (+5 s; not at the
launcher's SIGKILL after its 30 s grace; --start-up-stop-s allows kills in start-up longer), and nothing may be left
running. The next life must resume from the newest checkpoint that verified, and the final checkpoint's shards are
compared byte for byte with the reference's (on a difference: which tensors differ). --json lists what each kill did.

Prints a summary and writes --json; exits 1 when a check fails. Standard library only.
"""
import argparse
import hashlib
import json
import os
import random
import re
import shutil
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import time
from pathlib import Path

# The 96-row table of tests/e2e/dist_cli_test.cpp (dist_write_csv): 4 features, y their sum.
CSV_KEYS = ["data.source=csv", "data.csv.targets=[y]", "data.batch_size=8", "data.val_fraction=0.25"]
MLP_KEYS = ["model.name=mlp", "model.in_features=4", "model.hidden=[16]", "model.out_features=1"]


def write_csv(path):
    lines = ["f0,f1,f2,f3,y"]
    for r in range(96):
        values = [((r * 31 + f * 17) % 23) / 23.0 - 0.5 for f in range(4)]
        lines.append(",".join(repr(v) for v in values) + "," + repr(sum(values)))
    Path(path).write_text("\n".join(lines) + "\n")


def free_port():
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("", 0))
        return s.getsockname()[1]


def job_args(bellows, out, steps, every, config=None, extra=(), ranks=1, strategy=None, timeout_s=20, csv=None, port=None):
    data = ([*CSV_KEYS, f"data.path={csv}"] + ([] if config else MLP_KEYS)) if csv else []
    train = ["train", *([str(config)] if config else []), *data, *extra, f"output_dir={out}", "name=soak", "precision=fp32", "threads=1",
             "deterministic=true", "data.workers=0", f"train.max_steps={steps}", f"train.epochs={1000000 if csv else 1000}", "train.log_every_n_steps=100",
             f"checkpoint.every_n_steps={every}", "checkpoint.every_n_minutes=0", "checkpoint.keep_last=2",
             "log.tensorboard=false", "log.flops=false"]
    if ranks == 1:
        return [str(bellows), *train]
    return [str(bellows), "launch", "-n", str(ranks), "--master-port", str(port), "--", *train, f"dist.strategy={strategy}",
            f"dist.timeout_s={timeout_s}", "checkpoint.at_end=true"]


def sha256(path):
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def final_files(run_dir, steps):
    """The final checkpoint's files and their SHA-256: model.safetensors and state.bin (whole layout), or every shard
    (sharded layout); the manifest differs in its created_utc, and names the shards' SHA-256 itself."""
    ckpt = Path(run_dir) / "checkpoints" / f"step-{steps:09d}"
    if not ckpt.is_dir():
        return None
    if (ckpt / "model.safetensors").is_file():
        return {name: sha256(ckpt / name) for name in ("model.safetensors", "state.bin")}
    return {e.name: sha256(e) for e in sorted(ckpt.iterdir()) if e.name != "manifest.json"}


def safetensors_tensors(path):
    """{name: (dtype, shape, bytes)} of a safetensors file."""
    raw = Path(path).read_bytes()
    (n,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8:8 + n])
    body = raw[8 + n:]
    return {k: (v["dtype"], v["shape"], body[v["data_offsets"][0]:v["data_offsets"][1]])
            for k, v in header.items() if k != "__metadata__"}


def describe_differences(ref_ckpt, soaked_ckpt):
    """Which tensors of two sharded (or whole) checkpoints differ, with the largest difference of float32 ones."""
    out = []
    for f in sorted(p.name for p in Path(ref_ckpt).iterdir() if p.suffix == ".safetensors"):
        if not (Path(soaked_ckpt) / f).is_file():
            out.append(f"{f}: missing in the soaked run")
            continue
        a, b = safetensors_tensors(Path(ref_ckpt) / f), safetensors_tensors(Path(soaked_ckpt) / f)
        for name in sorted(set(a) | set(b)):
            if name not in a or name not in b:
                out.append(f"{f}: {name} only in the {'reference' if name in a else 'soaked run'}")
            elif a[name] != b[name]:
                dtype, shape, x = a[name]
                y = b[name][2]
                what = f"{f}: {name} {dtype} {shape} differs"
                if dtype == "F32" and len(x) == len(y):
                    u, v = struct.unpack(f"<{len(x) // 4}f", x), struct.unpack(f"<{len(y) // 4}f", y)
                    diff = [abs(p - q) for p, q in zip(u, v)]
                    what += f" in {sum(d != 0 for d in diff)} of {len(diff)} elements, at most {max(diff):.3g}"
                elif dtype in ("I64", "U8") and len(x) == len(y) and len(x) <= 64:
                    what += f": {x.hex()} against {y.hex()}"
                out.append(what)
    return out


def verify_all(bellows, ckpt_dir):
    """(verified, failed, half_written, failures, newest): complete checkpoint directories that verify or not, .tmp
    leftovers, and the newest checkpoint that verified."""
    verified = failed = half = 0
    failures = []
    newest = None
    if not ckpt_dir.is_dir():
        return verified, failed, half, failures, newest
    for entry in sorted(ckpt_dir.iterdir()):
        if entry.name.startswith(".tmp") or entry.name.startswith(".old"):
            half += 1
            continue
        if not entry.name.startswith("step-"):
            continue
        r = subprocess.run([str(bellows), "ckpt", "inspect", str(entry)], capture_output=True, text=True)
        if r.returncode == 0:
            verified += 1
            newest = entry  # step-XXXXXXXXX names sort by step
        else:
            failed += 1
            failures.append(f"{entry.name}: exit {r.returncode}: {r.stderr.strip()[:300]}")
    return verified, failed, half, failures, newest


# --- the processes of a launched job ---

def children_of(pid):
    """The processes whose parent is pid."""
    out = []
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            stat = Path(f"/proc/{d}/stat").read_text()
        except OSError:
            continue
        if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
            out.append(int(d))
    return out


def rank_of(pid):
    """The RANK in a process's environment (None before the launcher's child has exec'd bellows, or once gone)."""
    try:
        env = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    except OSError:
        return None
    for kv in env:
        if kv.startswith(b"RANK="):
            return int(kv[5:])
    return None


def alive(pid):
    """A process that exists and is not a zombie."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def processes_naming(text):
    """The live processes whose command line contains text (a run directory: what the soak started and left)."""
    out = []
    for d in os.listdir("/proc"):
        if d.isdigit() and int(d) != os.getpid():
            try:
                if text.encode() in Path(f"/proc/{d}/cmdline").read_bytes() and alive(int(d)):
                    out.append(int(d))
            except OSError:
                pass
    return out


def rank_pids(launcher, ranks, wait_s):
    """{rank: pid} of the launcher's children, once all of them have exec'd bellows (or as many as there are after wait_s)."""
    deadline = time.time() + wait_s
    while True:
        found = {}
        for pid in children_of(launcher.pid):
            r = rank_of(pid)
            if r is not None:
                found[r] = pid
        if len(found) == ranks or time.time() > deadline or launcher.poll() is not None:
            return found
        time.sleep(0.002)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--bellows", required=True, help="the bellows executable")
    ap.add_argument("--kills", type=int, default=50)
    ap.add_argument("--steps", type=int, default=20000, help="optimizer steps of the job")
    ap.add_argument("--every", type=int, default=50, help="checkpoint.every_n_steps")
    ap.add_argument("--max-delay", type=float, help="random kills: at most this many seconds after start (default 1.5; 10 with --ranks)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json", help="write the summary here")
    ap.add_argument("--config", help="the job's config file (default: the embedded demo, or with --ranks the CSV MLP)")
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="more overrides of the job (repeatable)")
    ap.add_argument("--ranks", type=int, default=1, help="processes of the job: above 1, `bellows launch -n RANKS`, one rank killed at a time")
    ap.add_argument("--strategy", default="zero2", help="dist.strategy with --ranks (zero1, zero2, fsdp: sharded checkpoints)")
    ap.add_argument("--timeout-s", type=int, default=20, help="dist.timeout_s with --ranks: the survivors stop by then")
    ap.add_argument("--start-up-stop-s", type=float,
                    help="with --ranks: how long the survivors of a kill in start-up (no plan printed yet: the rendezvous) may "
                         "take to be gone, counted but not failed; by default dist.timeout_s + 5 as for any kill (a rank whose "
                         "rank 0 dies just after listening can outlive dist.timeout_s: docs/reliability.md)")
    ap.add_argument("--csv", action="store_true", help="train on the 96-row CSV of the distributed tests (always with --ranks)")
    ap.add_argument("--keep", action="store_true", help="keep the run directories")
    a = ap.parse_args()
    multi = a.ranks > 1
    rng = random.Random(a.seed)
    work = Path(tempfile.mkdtemp(prefix="bellows-soak-"))
    env = dict(os.environ, KINETO_LOG_LEVEL="6")
    for k in ("RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "GROUP_RANK", "MASTER_ADDR", "MASTER_PORT"):
        env.pop(k, None)  # the launcher sets them; a rank is recognised by its own
    csv = None
    if multi or a.csv:
        csv = work / "data.csv"
        write_csv(csv)

    def args_for(out, port=None):
        return job_args(a.bellows, out, a.steps, a.every, a.config, a.set, a.ranks, a.strategy, a.timeout_s, csv, port)

    launched = []  # every launcher and rank process started, to leave nothing behind whatever happens

    def stop_everything():
        for p in launched:
            if alive(p):
                try:
                    os.kill(p, signal.SIGKILL)
                except ProcessLookupError:
                    pass

    t0 = time.time()
    try:
        # --- 1. the reference, uninterrupted ---
        ref = subprocess.run(args_for(work / "reference", free_port() if multi else None), capture_output=True, text=True, env=env)
        if ref.returncode != 0:
            sys.exit(f"the reference run failed ({ref.returncode}): {ref.stderr[-2000:]}")
        reference = final_files(work / "reference" / "soak", a.steps)
        ref_s = time.time() - t0
        if reference is None:
            sys.exit(f"the reference run left no checkpoint of step {a.steps}")

        # --- 2. the soak: kill, verify, resume ---
        run_dir = work / "soaked" / "soak"
        ckpt_dir = run_dir / "checkpoints"
        n_random = max(1, (a.kills + 1) // 2)
        if not multi:
            # Random kills come within delay_cap of a start: together they cover at most half of the reference's time, so
            # the job cannot finish before its last kill on a faster machine either.
            delay_cap = min(1.5 if a.max_delay is None else a.max_delay, 0.5 * ref_s / n_random)
            startup_s = None
        else:
            # Several processes take seconds to start (the launcher, LibTorch, the rendezvous, the plan), more on a busy
            # machine: random kills come within the reference's start-up plus their share of half of its training time,
            # and at most that share after the life's training began (its plan printed), so that together they cover at
            # most half of the training however long each start-up takes.
            wall = re.search(r"wall time\s+([0-9.]+) s", ref.stdout)
            startup_s = max(0.0, ref_s - float(wall.group(1))) if wall else 0.0
            share_s = 0.5 * (ref_s - startup_s) / n_random
            delay_cap = min(10.0 if a.max_delay is None else a.max_delay, startup_s + share_s)
        kills = in_write = under_way = finished_early = 0
        verified = failed = half_written = 0
        failures, skipped_notes, resumed_from = [], 0, 0
        victims = {}                 # rank -> kills
        random_in_training = 0      # random kills of a life that had logged an epoch
        stop_seconds = []            # from the kill to the launcher's exit, every rank gone
        launcher_codes = {}          # exit code -> count
        hung = left_running = survivors_silent = survivors_late = late_allowed = 0
        per_life = []                # with --ranks: what each kill did
        resume_checks = {"as_expected": 0, "wrong": 0, "not_reached": 0}
        wrong_resumes = []
        expected = None              # the newest checkpoint that verified after the last kill
        lives = 0

        def check_resume(text):
            m = re.search(r"resumed from (\S+) \(step", text)
            if m:
                ok = expected is not None and Path(m.group(1)) == expected
            elif "resume auto: no valid checkpoint" in text:
                ok = expected is None
            else:
                resume_checks["not_reached"] += 1
                return
            resume_checks["as_expected" if ok else "wrong"] += 1
            if not ok:
                wrong_resumes.append(f"life {lives}: resumed from {m.group(1) if m else 'nothing'}, the newest valid is {expected}")

        while kills < a.kills:
            def writes():  # the checkpoint writes under way or abandoned (their temporary directories)
                return {e.name for e in ckpt_dir.iterdir() if e.name.startswith(".tmp-step")} if ckpt_dir.is_dir() else set()
            before = writes()  # a dead writer's leftovers from an earlier kill do not count
            life_log = work / f"life-{lives:03d}.log"
            log = open(life_log, "w")
            p = subprocess.Popen(args_for(work / "soaked", free_port() if multi else None) + ["resume=auto"],
                                 stdout=log, stderr=subprocess.STDOUT, env=env)
            started = time.time()
            launched.append(p.pid)
            lives += 1
            # Every other kill waits for the 1st to 3rd checkpoint write of this life to begin (so that the job makes
            # progress between kills) and lands inside it.
            targeted = kills % 2 == 1
            target_write = rng.randint(1, 3)
            seen = set()
            deadline = time.time() + (60 if targeted else rng.uniform(0.05, delay_cap))
            training_began = None
            polls = 0
            pids = {}  # rank -> pid, found while waiting so that the kill does not wait for a scan of /proc
            while p.poll() is None and time.time() < deadline:
                polls += 1
                if multi and len(pids) < a.ranks and polls % 5 == 0:
                    pids = rank_pids(p, a.ranks, 0)
                if (multi and not targeted and training_began is None and polls % 10 == 0
                        and " optimizer steps\n" in life_log.read_text(errors="replace")):
                    training_began = time.time()  # the plan's last line: "N epoch(s) x M batches, S optimizer steps"
                    deadline = min(deadline, training_began + share_s)
                if targeted:
                    seen |= writes() - before
                    if len(seen) >= target_write:
                        time.sleep(rng.uniform(0, 0.004))  # somewhere inside the write
                        break
                time.sleep(0.001)
            if p.poll() is not None:  # it finished before the kill: the job is shorter than the soak
                finished_early = 1
                log.close()
                expected = verify_all(a.bellows, ckpt_dir)[4]  # what the last run resumes from
                break
            if not multi:
                p.send_signal(signal.SIGKILL)
                p.wait()
            else:
                victim = rng.randrange(a.ranks)
                if len(pids) < a.ranks:
                    pids = rank_pids(p, a.ranks, 30)
                launched.extend(pids.values())
                if victim not in pids:  # the launcher ended (or never started the rank): nothing of this life to kill
                    finished_early = 1 if p.poll() == 0 else finished_early
                    p.wait()
                    log.close()
                    failures.append(f"life {lives}: rank {victim} not found among the launcher's children ({pids}); launcher exit {p.returncode}")
                    break
                try:
                    os.kill(pids[victim], signal.SIGKILL)
                except ProcessLookupError:
                    pass
                killed_at = time.time()
                write_under_way = bool(writes() - before)  # a write of this life was under way at the kill
                under_way += write_under_way
                victims[victim] = victims.get(victim, 0) + 1
                try:
                    p.wait(timeout=a.timeout_s + 60)  # the survivors fail within dist.timeout_s; the launcher's grace is 30 s
                except subprocess.TimeoutExpired:
                    hung += 1
                    failures.append(f"life {lives}: the launcher was still running {a.timeout_s + 60} s after rank {victim} was killed")
                    stop_everything()
                    p.wait()
                stop_seconds.append(time.time() - killed_at)
                launcher_codes[p.returncode] = launcher_codes.get(p.returncode, 0) + 1
                still = [pid for pid in pids.values() if alive(pid)]
                if still:
                    left_running += len(still)
                    failures.append(f"life {lives}: rank process(es) {still} still running after the launcher exited")
                    for pid in still:
                        os.kill(pid, signal.SIGKILL)
            log.close()
            kills += 1
            text = life_log.read_text(errors="replace")
            if multi:
                # A survivor stops with an error naming its rank ("bellows: resource error: rank 1 of 2: ...") when a
                # collective fails, or quietly at the launcher's SIGTERM (in start-up, before any collective); either way
                # within dist.timeout_s, not at the launcher's SIGKILL after its grace (30 s).
                reported = {int(r) for r in re.findall(r"^bellows: [a-z ]*error: rank (\d+) of ", text, re.M)} - {victim}
                silent = a.ranks - 1 - len(reported)
                late = stop_seconds[-1] > a.timeout_s + 5
                in_start_up = " optimizer steps\n" not in text
                allowed = late and in_start_up and a.start_up_stop_s is not None and stop_seconds[-1] <= a.start_up_stop_s
                survivors_silent += silent
                survivors_late += late
                late_allowed += allowed
                if late and not allowed:
                    failures.append(f"life {lives} ({'write' if targeted else 'random'} kill of rank {victim}, "
                                    f"{killed_at - started:.2f} s after the start{', in start-up' if in_start_up else ''}): every rank gone {stop_seconds[-1]:.1f} s after the "
                                    f"kill (dist.timeout_s {a.timeout_s}); log {life_log.name}")
                per_life.append({"life": lives, "kind": "write" if targeted else "random", "rank_killed": victim,
                                 "seconds_after_start": round(killed_at - started, 2),
                                 "in_start_up": in_start_up, "write_under_way": write_under_way,
                                 "seconds_to_all_gone": round(stop_seconds[-1], 2),
                                 "launcher_exit": p.returncode, "survivor_errors": re.findall(r"^bellows: [a-z ]*error: .{0,160}", text, re.M)})
            check_resume(text)
            if not targeted and re.search(r"^epoch \d+/\d+ ", text, re.M):
                random_in_training += 1
            if writes() - before:
                in_write += 1
            v, f, h, why, expected = verify_all(a.bellows, ckpt_dir)
            verified += v
            failed += f
            half_written += h
            failures += why
        # --- 3. to the end ---
        last = subprocess.run(args_for(work / "soaked", free_port() if multi else None) + ["resume=auto"], capture_output=True, text=True, env=env)
        (work / "last.log").write_text(last.stdout + last.stderr)
        lives += 1
        if kills:
            check_resume(last.stdout + last.stderr)
    finally:
        stop_everything()
    if multi:  # nothing of any life may still run: no launcher, no rank
        stray = processes_naming(str(work))
        if stray:
            left_running += len(stray)
            failures.append(f"processes still running at the end: {stray}")
            for pid in stray:
                os.kill(pid, signal.SIGKILL)
    text = "".join(p.read_text(errors="replace") for p in sorted(work.glob("life-*.log"))) + last.stdout + last.stderr
    resumed_from = text.count("resumed from")
    skipped_notes = text.count("warning: skipped checkpoint")  # complete-looking ones passed over on resume
    soaked = final_files(run_dir, a.steps) if last.returncode == 0 else None
    equal = soaked is not None and soaked == reference
    differences = []
    if soaked is not None and not equal:
        differences = describe_differences(work / "reference" / "soak" / "checkpoints" / f"step-{a.steps:09d}",
                                           run_dir / "checkpoints" / f"step-{a.steps:09d}")
    summary = {
        "kills": kills, "requested_kills": a.kills, "kills_inside_a_checkpoint_write": in_write,
        "resumed_runs": resumed_from, "final_run_exit": last.returncode, "finished_before_all_kills": bool(finished_early),
        "checkpoints_verified_after_kills": verified, "checkpoints_that_did_not_verify": failed,
        "half_written_left_by_kills": half_written, "skip_messages_on_resume": skipped_notes,
        "bitwise_equal_to_uninterrupted": equal, "reference": reference, "soaked": soaked,
        "steps": a.steps, "checkpoint_every_n_steps": a.every, "reference_seconds": round(ref_s, 1),
        "random_kill_within_seconds": round(delay_cap, 3),
        "resumes_from_the_newest_valid": resume_checks["as_expected"], "resumes_from_another": resume_checks["wrong"],
        "lives_killed_before_resuming": resume_checks["not_reached"], "wrong_resumes": wrong_resumes[:20],
        "total_seconds": round(time.time() - t0, 1), "failures": failures[:20],
    }
    if multi:
        summary.update({
            "ranks": a.ranks, "strategy": a.strategy, "dist_timeout_s": a.timeout_s, "config": a.config, "overrides": a.set,
            "killed_rank_counts": {str(k): v for k, v in sorted(victims.items())},
            "random_kills_after_training_began": random_in_training, "reference_startup_seconds": round(startup_s, 1),
            "launcher_exit_codes": {str(k): v for k, v in sorted(launcher_codes.items())},
            "seconds_from_kill_to_all_ranks_gone_max": round(max(stop_seconds), 2) if stop_seconds else None,
            "kills_while_a_write_was_under_way": under_way, "launchers_hung": hung, "rank_processes_left_running": left_running,
            "survivors_stopped_quietly_by_the_launcher": survivors_silent, "lives_whose_survivors_outlived_dist_timeout_s": survivors_late,
            "of_them_in_start_up_within_start_up_stop_s": late_allowed, "start_up_stop_s": a.start_up_stop_s,
            "differing_tensors": differences[:50], "lives": per_life,
        })
    print(f"kill -9 soak: {kills}/{a.kills} kills ({in_write} inside a checkpoint write), {resumed_from} resumed runs, "
          f"final run exit {last.returncode}")
    if multi:
        print(f"  kills while a checkpoint write of that life was under way (its temporary directory there just after the kill): {under_way}")
        print(f"  {a.ranks} ranks, dist.strategy={a.strategy}; killed ranks {summary['killed_rank_counts']}; launcher exits "
              f"{summary['launcher_exit_codes']}; every rank gone at most {summary['seconds_from_kill_to_all_ranks_gone_max']} s "
              f"after a kill; hung {hung}, left running {left_running}")
        print(f"  survivors stopped quietly by the launcher's SIGTERM (no error of their own: killed in start-up): "
              f"{survivors_silent}; lives whose survivors outlived dist.timeout_s={a.timeout_s} (+5 s): {survivors_late}"
              + (f" ({late_allowed} of them killed in start-up and gone within --start-up-stop-s {a.start_up_stop_s:g}: "
                 f"allowed)" if late_allowed else ""))
        print(f"  random kills after training began (an epoch logged): {random_in_training} of {(kills + 1) // 2}")
    print(f"  lives that resumed from the newest valid checkpoint (or started afresh with none): {resume_checks['as_expected']}; "
          f"from another: {resume_checks['wrong']}; killed before resuming: {resume_checks['not_reached']}")
    print(f"  checkpoints verified after kills: {verified}; that did not verify: {failed}; half-written left by kills: "
          f"{half_written} (never loaded: resume skips them)")
    print(f"  final {'weights and trainer state' if not multi else 'shards (weights and trainer state)'} bitwise equal to the "
          f"uninterrupted run: {'yes' if equal else 'NO'}")
    for line in differences[:20]:
        print(f"    {line}")
    print(f"  {a.steps} steps, checkpoint every {a.every}; {summary['total_seconds']} s in all")
    if a.json:
        Path(a.json).write_text(json.dumps(summary, indent=2) + "\n")
    ok = kills == a.kills and failed == 0 and equal and last.returncode == 0 and resume_checks["wrong"] == 0
    if multi:
        ok = ok and hung == 0 and left_running == 0 and not failures
    if not ok:
        print(f"FAILED; runs kept in {work}", file=sys.stderr)
        for line in failures[:10] + wrong_resumes[:10]:
            print(f"  {line}", file=sys.stderr)
        if last.returncode != 0:
            print(last.stderr[-2000:], file=sys.stderr)
    elif not a.keep:
        shutil.rmtree(work, ignore_errors=True)
    print(f"{1 if ok else 0} passed, {0 if ok else 1} failed")
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
