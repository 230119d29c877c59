#!/usr/bin/env python3
"""Runs bellows' libFuzzer targets (tests/fuzz, built by `scripts/dev.sh fuzz` into build-asan/) one after the
other, each for --seconds from its seed corpus, and prints a table: executions, executions per second, coverage
(libFuzzer's edge counter `cov` and feature count `ft`), corpus size, and the crash, if any, with the file that
reproduces it. Exit 1 when a target crashed, leaked, timed out or ran out of memory.

    python3 tests/fuzz/run_fuzz.py --build build-asan --seconds 600 [--json out.json] [TARGET ...]

The working corpus of each target is build-asan/fuzz-corpus/<target> (what a run finds is kept there for the
next run); the seeds in tests/fuzz/corpus/<target> are read, never written. Standard library only.
"""
import argparse
import json
import re
import subprocess
import sys
import time
from pathlib import Path


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--build", default="build-asan")
    ap.add_argument("--seconds", type=int, default=20)
    ap.add_argument("--json")
    ap.add_argument("targets", nargs="*", help="target names (default: every bellows_fuzz_* executable)")
    a = ap.parse_args()
    root = Path(__file__).resolve().parent
    build = Path(a.build).resolve()
    binaries = {p.name[len("bellows_fuzz_"):]: p for p in sorted(build.glob("tests/fuzz/bellows_fuzz_*")) if p.is_file()}
    if not binaries:
        sys.exit(f"no bellows_fuzz_* executables under {build}/tests/fuzz: build with scripts/dev.sh fuzz")
    names = a.targets or list(binaries)
    unknown = [n for n in names if n not in binaries]
    if unknown:
        sys.exit(f"unknown fuzz target(s) {unknown}; built: {sorted(binaries)}")
    rows, failed = [], 0
    for name in names:
        corpus = build / "fuzz-corpus" / name
        artifacts = build / "fuzz-artifacts" / name
        corpus.mkdir(parents=True, exist_ok=True)
        artifacts.mkdir(parents=True, exist_ok=True)
        seeds = root / "corpus" / name
        cmd = [str(binaries[name]), f"-max_total_time={a.seconds}", "-timeout=25", "-rss_limit_mb=4096", "-print_final_stats=1",
               f"-artifact_prefix={artifacts}/", str(corpus)] + ([str(seeds)] if seeds.is_dir() else [])
        t0 = time.time()
        r = subprocess.run(cmd, capture_output=True, text=True, errors="replace")
        log = r.stdout + r.stderr
        (build / "fuzz-artifacts" / f"{name}.log").write_text(log)
        execs = re.findall(r"stat::number_of_executed_units:\s*(\d+)", log)
        cov = re.findall(r"cov: (\d+) ft: (\d+)", log)
        crash = re.findall(r"Test unit written to (\S+)", log)
        problem = ""
        if r.returncode != 0:
            failed += 1
            kind = re.search(r"ERROR: (\w+): ([^\n]*)", log) or re.search(r"(deadly signal|out-of-memory|timeout|uncaught exception)", log)
            problem = kind.group(0) if kind else f"exit {r.returncode}"
        row = {"target": name, "seconds": round(time.time() - t0, 1), "executions": int(execs[-1]) if execs else 0,
               "coverage": int(cov[-1][0]) if cov else 0, "features": int(cov[-1][1]) if cov else 0,
               "corpus": sum(1 for _ in corpus.iterdir()), "exit": r.returncode, "problem": problem,
               "reproducer": crash[-1] if crash else ""}
        row["executions_per_s"] = round(row["executions"] / max(row["seconds"], 1e-9))
        rows.append(row)
        print(f"{name:<12} {row['executions']:>10} runs {row['executions_per_s']:>7}/s  cov {row['coverage']:>6}  ft {row['features']:>6}  "
              f"corpus {row['corpus']:>5}  {'ok' if not problem else 'FAILED: ' + problem + ' ' + row['reproducer']}", flush=True)
    if a.json:
        Path(a.json).write_text(json.dumps({"seconds_per_target": a.seconds, "targets": rows}, indent=2) + "\n")
    print(f"{len(rows) - failed} passed, {failed} failed")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
