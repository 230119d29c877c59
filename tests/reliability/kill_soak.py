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
96-row CSV of tests/e2e/dist_cli.h (written into the work directory; an MLP of 4 -> 16 -> 1 unless --config
names a model, e.g. tests/reliability/soak_transformer.yaml for fsdp). Each kill is SIGKILL of one rank chosen at
random (found as a child of the launcher by its RANK); the surviving ranks must then stop, with an error when their
collective fails or quietly at the launcher's SIGTERM in start-up, within dist.timeout_s (+5 s; not at the
launcher's SIGKILL after its 30 s grace; --start-up-stop-s allows kills in start-up longer), and nothing may be left
running. The next life must resume from the newest checkpoint that verified, and the final checkpoint's shards are
compared byte for byte with the reference's (on a difference: which tensors differ). --json lists what each kill did.

Prints a summary and writes --json; exits 1 when a check fails. Standard library only (the job's processes are
found by soak_processes.py beside it).
"""
import argparse
import hashlib
import json
import os
import random
import re
import shutil
import signal
import struct
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from soak_processes import alive, free_port, processes_naming, rank_pids

# The 96-row table of tests/e2e/dist_cli.h (dist_write_csv): 4 features, y their sum.
CSV_KEYS = ["data.source=csv", "data.csv.targets=[y]", "data.batch_size=8", "data.val_fraction=0.25"]
MLP_KEYS = ["model.name=mlp", "model.in_features=4", "model.hidden=[16]", "model.out_features=1"]


def write_csv(path):
    lines = ["f0,f1,f2,f3,y"]
    for r in range(96):
        values = [((r * 31 + f * 17) % 23) / 23.0 - 0.5 for f in range(4)]
        lines.append(",".join(repr(v) for v in values) + "," + repr(sum(values)))
    Path(path).write_text("\n".join(lines) + "\n")


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


def parse_args():
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
    return ap.parse_args()


class Life:
    """One start of the soaked job: its process, its log, when it started and the checkpoint writes before it."""

    def __init__(self, process, log, log_path, started, writes_before, targeted):
        self.p, self.log, self.log_path, self.started = process, log, log_path, started
        self.before, self.targeted = writes_before, targeted
        self.pids = {}  # rank -> pid, found while waiting so that the kill does not wait for a scan of /proc


class Soak:
    """The soak's steps (the file's header) and what they count."""

    def __init__(self, a):
        self.a = a
        self.multi = a.ranks > 1
        self.rng = random.Random(a.seed)
        self.work = Path(tempfile.mkdtemp(prefix="bellows-soak-"))
        self.env = dict(os.environ, KINETO_LOG_LEVEL="6")
        for k in ("RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "GROUP_RANK", "MASTER_ADDR", "MASTER_PORT"):
            self.env.pop(k, None)  # the launcher sets them; a rank is recognised by its own
        self.csv = None
        if self.multi or a.csv:
            self.csv = self.work / "data.csv"
            write_csv(self.csv)
        self.launched = []  # every launcher and rank process started, to leave nothing behind whatever happens
        self.run_dir = self.work / "soaked" / "soak"
        self.ckpt_dir = self.run_dir / "checkpoints"
        self.kills = self.in_write = self.under_way = self.finished_early = 0
        self.verified = self.failed = self.half_written = 0
        self.failures = []
        self.victims = {}                 # rank -> kills
        self.random_in_training = 0      # random kills of a life that had logged an epoch
        self.stop_seconds = []            # from the kill to the launcher's exit, every rank gone
        self.launcher_codes = {}          # exit code -> count
        self.hung = self.left_running = self.survivors_silent = self.survivors_late = self.late_allowed = 0
        self.per_life = []                # with --ranks: what each kill did
        self.resume_checks = {"as_expected": 0, "wrong": 0, "not_reached": 0}
        self.wrong_resumes = []
        self.expected = None              # the newest checkpoint that verified after the last kill
        self.lives = 0
        self.startup_s = self.share_s = None
        self.t0 = time.time()

    def args_for(self, out, port=None):
        a = self.a
        return job_args(a.bellows, out, a.steps, a.every, a.config, a.set, a.ranks, a.strategy, a.timeout_s, self.csv, port)

    def port(self):
        return free_port() if self.multi else None

    def stop_everything(self):
        for p in self.launched:
            if alive(p):
                try:
                    os.kill(p, signal.SIGKILL)
                except ProcessLookupError:
                    pass

    # --- 1. the reference, uninterrupted ---
    def run_reference(self):
        ref = subprocess.run(self.args_for(self.work / "reference", self.port()), capture_output=True, text=True, env=self.env)
        if ref.returncode != 0:
            sys.exit(f"the reference run failed ({ref.returncode}): {ref.stderr[-2000:]}")
        self.reference = final_files(self.work / "reference" / "soak", self.a.steps)
        self.ref_s = time.time() - self.t0
        if self.reference is None:
            sys.exit(f"the reference run left no checkpoint of step {self.a.steps}")
        self.plan_random_kills(ref.stdout)

    def plan_random_kills(self, ref_stdout):
        """How long after a start a random kill may come (delay_cap; with --ranks also share_s after training began)."""
        a = self.a
        n_random = max(1, (a.kills + 1) // 2)
        if not self.multi:
            # Random kills come within delay_cap of a start: together they cover at most half of the reference's time, so
            # the job cannot finish before its last kill on a faster machine either.
            self.delay_cap = min(1.5 if a.max_delay is None else a.max_delay, 0.5 * self.ref_s / n_random)
            return
        # Several processes take seconds to start (the launcher, LibTorch, the rendezvous, the plan), more on a busy
        # machine: random kills come within the reference's start-up plus their share of half of its training time,
        # and at most that share after the life's training began (its plan printed), so that together they cover at
        # most half of the training however long each start-up takes.
        wall = re.search(r"wall time\s+([0-9.]+) s", ref_stdout)
        self.startup_s = max(0.0, self.ref_s - float(wall.group(1))) if wall else 0.0
        self.share_s = 0.5 * (self.ref_s - self.startup_s) / n_random
        self.delay_cap = min(10.0 if a.max_delay is None else a.max_delay, self.startup_s + self.share_s)

    def check_resume(self, text):
        """Whether the life resumed from the newest checkpoint that verified after the last kill."""
        m = re.search(r"resumed from (\S+) \(step", text)
        if m:
            ok = self.expected is not None and Path(m.group(1)) == self.expected
        elif "resume auto: no valid checkpoint" in text:
            ok = self.expected is None
        else:
            self.resume_checks["not_reached"] += 1
            return
        self.resume_checks["as_expected" if ok else "wrong"] += 1
        if not ok:
            self.wrong_resumes.append(f"life {self.lives}: resumed from {m.group(1) if m else 'nothing'}, the newest valid is "
                                      f"{self.expected}")

    def writes(self):
        """The checkpoint writes under way or abandoned (their temporary directories)."""
        d = self.ckpt_dir
        return {e.name for e in d.iterdir() if e.name.startswith(".tmp-step")} if d.is_dir() else set()

    # --- 2. the soak: kill, verify, resume ---
    def soak(self):
        while self.kills < self.a.kills:
            life = self.start_life()
            self.wait_for_the_moment(life)
            if life.p.poll() is not None:  # it finished before the kill: the job is shorter than the soak
                self.finished_early = 1
                life.log.close()
                self.expected = verify_all(self.a.bellows, self.ckpt_dir)[4]  # what the last run resumes from
                break
            if not self.multi:
                life.p.send_signal(signal.SIGKILL)
                life.p.wait()
            elif not self.kill_a_rank(life):
                break
            life.log.close()
            self.kills += 1
            self.after_kill(life)

    def start_life(self):
        before = self.writes()  # a dead writer's leftovers from an earlier kill do not count
        life_log = self.work / f"life-{self.lives:03d}.log"
        log = open(life_log, "w")
        p = subprocess.Popen(self.args_for(self.work / "soaked", self.port()) + ["resume=auto"],
                             stdout=log, stderr=subprocess.STDOUT, env=self.env)
        started = time.time()
        self.launched.append(p.pid)
        self.lives += 1
        # Every other kill waits for the 1st to 3rd checkpoint write of this life to begin (so that the job makes
        # progress between kills) and lands inside it.
        return Life(p, log, life_log, started, before, targeted=self.kills % 2 == 1)

    def wait_for_the_moment(self, life):
        """Until the kill: a random moment, or inside the life's 1st to 3rd checkpoint write (or the life's end)."""
        a, rng, multi = self.a, self.rng, self.multi
        target_write = rng.randint(1, 3)
        seen = set()
        deadline = time.time() + (60 if life.targeted else rng.uniform(0.05, self.delay_cap))
        training_began = None
        polls = 0
        while life.p.poll() is None and time.time() < deadline:
            polls += 1
            if multi and len(life.pids) < a.ranks and polls % 5 == 0:
                life.pids = rank_pids(life.p, a.ranks, 0)
            if (multi and not life.targeted and training_began is None and polls % 10 == 0
                    and " optimizer steps\n" in life.log_path.read_text(errors="replace")):
                training_began = time.time()  # the plan's last line: "N epoch(s) x M batches, S optimizer steps"
                deadline = min(deadline, training_began + self.share_s)
            if life.targeted:
                seen |= self.writes() - life.before
                if len(seen) >= target_write:
                    time.sleep(rng.uniform(0, 0.004))  # somewhere inside the write
                    break
            time.sleep(0.001)

    def kill_a_rank(self, life):
        """SIGKILL of one rank; then the launcher and every rank must be gone. False when there was no rank to kill."""
        a, p = self.a, life.p
        victim = self.rng.randrange(a.ranks)
        if len(life.pids) < a.ranks:
            life.pids = rank_pids(p, a.ranks, 30)
        self.launched.extend(life.pids.values())
        if victim not in life.pids:  # the launcher ended (or never started the rank): nothing of this life to kill
            self.finished_early = 1 if p.poll() == 0 else self.finished_early
            p.wait()
            life.log.close()
            self.failures.append(f"life {self.lives}: rank {victim} not found among the launcher's children ({life.pids}); "
                                 f"launcher exit {p.returncode}")
            return False
        try:
            os.kill(life.pids[victim], signal.SIGKILL)
        except ProcessLookupError:
            pass
        life.victim, life.killed_at = victim, time.time()
        life.write_under_way = bool(self.writes() - life.before)  # a write of this life was under way at the kill
        self.under_way += life.write_under_way
        self.victims[victim] = self.victims.get(victim, 0) + 1
        self.wait_for_the_launcher(life)
        return True

    def wait_for_the_launcher(self, life):
        a, p, victim = self.a, life.p, life.victim
        try:
            p.wait(timeout=a.timeout_s + 60)  # the survivors fail within dist.timeout_s; the launcher's grace is 30 s
        except subprocess.TimeoutExpired:
            self.hung += 1
            self.failures.append(f"life {self.lives}: the launcher was still running {a.timeout_s + 60} s after rank {victim} "
                                 f"was killed")
            self.stop_everything()
            p.wait()
        self.stop_seconds.append(time.time() - life.killed_at)
        self.launcher_codes[p.returncode] = self.launcher_codes.get(p.returncode, 0) + 1
        still = [pid for pid in life.pids.values() if alive(pid)]
        if still:
            self.left_running += len(still)
            self.failures.append(f"life {self.lives}: rank process(es) {still} still running after the launcher exited")
            for pid in still:
                os.kill(pid, signal.SIGKILL)

    def after_kill(self, life):
        """The life's log checked, and every checkpoint verified."""
        text = life.log_path.read_text(errors="replace")
        if self.multi:
            self.judge_the_survivors(life, text)
        self.check_resume(text)
        if not life.targeted and re.search(r"^epoch \d+/\d+ ", text, re.M):
            self.random_in_training += 1
        if self.writes() - life.before:
            self.in_write += 1
        v, f, h, why, self.expected = verify_all(self.a.bellows, self.ckpt_dir)
        self.verified += v
        self.failed += f
        self.half_written += h
        self.failures += why

    def judge_the_survivors(self, life, text):
        # A survivor stops with an error naming its rank ("bellows: resource error: rank 1 of 2: ...") when a
        # collective fails, or quietly at the launcher's SIGTERM (in start-up, before any collective); either way
        # within dist.timeout_s, not at the launcher's SIGKILL after its grace (30 s).
        a, victim, stop_s = self.a, life.victim, self.stop_seconds[-1]
        reported = {int(r) for r in re.findall(r"^bellows: [a-z ]*error: rank (\d+) of ", text, re.M)} - {victim}
        silent = a.ranks - 1 - len(reported)
        late = stop_s > a.timeout_s + 5
        in_start_up = " optimizer steps\n" not in text
        allowed = late and in_start_up and a.start_up_stop_s is not None and stop_s <= a.start_up_stop_s
        self.survivors_silent += silent
        self.survivors_late += late
        self.late_allowed += allowed
        kind = "write" if life.targeted else "random"
        after_start = life.killed_at - life.started
        if late and not allowed:
            self.failures.append(f"life {self.lives} ({kind} kill of rank {victim}, {after_start:.2f} s after the start"
                                 f"{', in start-up' if in_start_up else ''}): every rank gone {stop_s:.1f} s after the "
                                 f"kill (dist.timeout_s {a.timeout_s}); log {life.log_path.name}")
        self.per_life.append({"life": self.lives, "kind": kind, "rank_killed": victim,
                              "seconds_after_start": round(after_start, 2),
                              "in_start_up": in_start_up, "write_under_way": life.write_under_way,
                              "seconds_to_all_gone": round(stop_s, 2), "launcher_exit": life.p.returncode,
                              "survivor_errors": re.findall(r"^bellows: [a-z ]*error: .{0,160}", text, re.M)})

    # --- 3. to the end ---
    def run_to_end(self):
        self.last = subprocess.run(self.args_for(self.work / "soaked", self.port()) + ["resume=auto"], capture_output=True,
                                   text=True, env=self.env)
        (self.work / "last.log").write_text(self.last.stdout + self.last.stderr)
        self.lives += 1
        if self.kills:
            self.check_resume(self.last.stdout + self.last.stderr)

    def sweep_strays(self):
        """With --ranks nothing of any life may still run: no launcher, no rank."""
        if not self.multi:
            return
        stray = processes_naming(str(self.work))
        if stray:
            self.left_running += len(stray)
            self.failures.append(f"processes still running at the end: {stray}")
            for pid in stray:
                os.kill(pid, signal.SIGKILL)

    def compare_the_end(self):
        """The logs' resume counts, and the final checkpoint against the reference's."""
        a, last = self.a, self.last
        text = "".join(p.read_text(errors="replace") for p in sorted(self.work.glob("life-*.log"))) + last.stdout + last.stderr
        self.resumed_from = text.count("resumed from")
        self.skipped_notes = text.count("warning: skipped checkpoint")  # complete-looking ones passed over on resume
        self.soaked = final_files(self.run_dir, a.steps) if last.returncode == 0 else None
        self.equal = self.soaked is not None and self.soaked == self.reference
        self.differences = []
        if self.soaked is not None and not self.equal:
            self.differences = describe_differences(self.work / "reference" / "soak" / "checkpoints" / f"step-{a.steps:09d}",
                                                    self.run_dir / "checkpoints" / f"step-{a.steps:09d}")

    def summary(self):
        a = self.a
        summary = {
            "kills": self.kills, "requested_kills": a.kills, "kills_inside_a_checkpoint_write": self.in_write,
            "resumed_runs": self.resumed_from, "final_run_exit": self.last.returncode,
            "finished_before_all_kills": bool(self.finished_early),
            "checkpoints_verified_after_kills": self.verified, "checkpoints_that_did_not_verify": self.failed,
            "half_written_left_by_kills": self.half_written, "skip_messages_on_resume": self.skipped_notes,
            "bitwise_equal_to_uninterrupted": self.equal, "reference": self.reference, "soaked": self.soaked,
            "steps": a.steps, "checkpoint_every_n_steps": a.every, "reference_seconds": round(self.ref_s, 1),
            "random_kill_within_seconds": round(self.delay_cap, 3),
            "resumes_from_the_newest_valid": self.resume_checks["as_expected"],
            "resumes_from_another": self.resume_checks["wrong"],
            "lives_killed_before_resuming": self.resume_checks["not_reached"], "wrong_resumes": self.wrong_resumes[:20],
            "total_seconds": round(time.time() - self.t0, 1), "failures": self.failures[:20],
        }
        if self.multi:
            summary.update(self.sharded_summary())
        return summary

    def sharded_summary(self):
        a, stop_seconds = self.a, self.stop_seconds
        return {
            "ranks": a.ranks, "strategy": a.strategy, "dist_timeout_s": a.timeout_s, "config": a.config, "overrides": a.set,
            "killed_rank_counts": {str(k): v for k, v in sorted(self.victims.items())},
            "random_kills_after_training_began": self.random_in_training,
            "reference_startup_seconds": round(self.startup_s, 1),
            "launcher_exit_codes": {str(k): v for k, v in sorted(self.launcher_codes.items())},
            "seconds_from_kill_to_all_ranks_gone_max": round(max(stop_seconds), 2) if stop_seconds else None,
            "kills_while_a_write_was_under_way": self.under_way, "launchers_hung": self.hung,
            "rank_processes_left_running": self.left_running,
            "survivors_stopped_quietly_by_the_launcher": self.survivors_silent,
            "lives_whose_survivors_outlived_dist_timeout_s": self.survivors_late,
            "of_them_in_start_up_within_start_up_stop_s": self.late_allowed, "start_up_stop_s": a.start_up_stop_s,
            "differing_tensors": self.differences[:50], "lives": self.per_life,
        }

    def print_summary(self, summary):
        a = self.a
        print(f"kill -9 soak: {self.kills}/{a.kills} kills ({self.in_write} inside a checkpoint write), {self.resumed_from} "
              f"resumed runs, final run exit {self.last.returncode}")
        if self.multi:
            self.print_sharded(summary)
        rc = self.resume_checks
        print(f"  lives that resumed from the newest valid checkpoint (or started afresh with none): {rc['as_expected']}; "
              f"from another: {rc['wrong']}; killed before resuming: {rc['not_reached']}")
        print(f"  checkpoints verified after kills: {self.verified}; that did not verify: {self.failed}; half-written left "
              f"by kills: {self.half_written} (never loaded: resume skips them)")
        print(f"  final {'weights and trainer state' if not self.multi else 'shards (weights and trainer state)'} bitwise "
              f"equal to the uninterrupted run: {'yes' if self.equal else 'NO'}")
        for line in self.differences[:20]:
            print(f"    {line}")
        print(f"  {a.steps} steps, checkpoint every {a.every}; {summary['total_seconds']} s in all")

    def print_sharded(self, summary):
        a = self.a
        print(f"  kills while a checkpoint write of that life was under way (its temporary directory there just after the "
              f"kill): {self.under_way}")
        print(f"  {a.ranks} ranks, dist.strategy={a.strategy}; killed ranks {summary['killed_rank_counts']}; launcher exits "
              f"{summary['launcher_exit_codes']}; every rank gone at most {summary['seconds_from_kill_to_all_ranks_gone_max']} s "
              f"after a kill; hung {self.hung}, left running {self.left_running}")
        print(f"  survivors stopped quietly by the launcher's SIGTERM (no error of their own: killed in start-up): "
              f"{self.survivors_silent}; lives whose survivors outlived dist.timeout_s={a.timeout_s} (+5 s): "
              f"{self.survivors_late}"
              + (f" ({self.late_allowed} of them killed in start-up and gone within --start-up-stop-s "
                 f"{a.start_up_stop_s:g}: allowed)" if self.late_allowed else ""))
        print(f"  random kills after training began (an epoch logged): {self.random_in_training} of {(self.kills + 1) // 2}")

    def passed(self):
        ok = (self.kills == self.a.kills and self.failed == 0 and self.equal and self.last.returncode == 0
              and self.resume_checks["wrong"] == 0)
        if self.multi:
            ok = ok and self.hung == 0 and self.left_running == 0 and not self.failures
        return ok

    def report_failure(self):
        print(f"FAILED; runs kept in {self.work}", file=sys.stderr)
        for line in self.failures[:10] + self.wrong_resumes[:10]:
            print(f"  {line}", file=sys.stderr)
        if self.last.returncode != 0:
            print(self.last.stderr[-2000:], file=sys.stderr)


def main():
    a = parse_args()
    soak = Soak(a)
    try:
        soak.run_reference()
        soak.soak()
        soak.run_to_end()
    finally:
        soak.stop_everything()
    soak.sweep_strays()
    soak.compare_the_end()
    summary = soak.summary()
    soak.print_summary(summary)
    if a.json:
        Path(a.json).write_text(json.dumps(summary, indent=2) + "\n")
    ok = soak.passed()
    if not ok:
        soak.report_failure()
    elif not a.keep:
        shutil.rmtree(soak.work, ignore_errors=True)
    print(f"{1 if ok else 0} passed, {0 if ok else 1} failed")
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
