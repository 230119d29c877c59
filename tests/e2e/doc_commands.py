#!/usr/bin/env python3
"""The commands README.md and docs/*.md show a user, run as written (issue 32): each entry names the document and the
exact text it shows, which must still be there, and the command run for it: the same words, with the placeholders
(CONFIG, PATH, NAME, ...) filled and optional [...] parts left out or filled. Commands that train for minutes are not
here; their behaviour has its own tests. Exit 1 naming every command that failed or text that is gone.

    python3 tests/e2e/doc_commands.py --bellows build/bin/bellows --source . --work /tmp/doc-commands
"""
import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

# (document, the text it shows, the command run (after "bellows"), exit code, text the output must contain)
COMMANDS = [
    ("README.md", "`bellows hw`", ["hw"], 0, "Recommendations"),
    ("README.md", "`bellows hw --json`", ["hw", "--json"], 0, None),
    ("README.md", "`bellows config show [CONFIG] [overrides]`", ["config", "show", "name=from-the-docs"], 0, "name: from-the-docs"),
    ("docs/training.md", "`bellows config keys`", ["config", "keys"], 0, "hardware_profile (string) = auto"),
    ("docs/models.md", "`bellows config keys --model NAME`", ["config", "keys", "--model", "resnet"], 0, "model.depth (int)"),
    ("docs/gpu.md", "`bellows selftest --device cpu`", ["selftest", "--device", "cpu"], 0, None),
    ("README.md", "`bellows train [CONFIG] [key=value ...] [--flag v ...]`",
     ["train", "train.max_steps=4", "--output-dir", "runs", "checkpoint.every_n_steps=2"], 0, "step 4"),
    ("README.md", "`bellows ckpt inspect PATH [--json]`", ["ckpt", "inspect", "runs/demo", "--json"], 0, '"valid": true'),
    ("README.md", "`bellows ckpt export PATH --to FILE [--ema]`", ["ckpt", "export", "runs/demo", "--to", "weights.safetensors"], 0, None),
    ("README.md", "`bellows predict PATH --input FILE.npy\\|FILE.npz[:array] --output OUT.npy`",
     ["predict", "runs/demo", "--input", "x.npy", "--output", "out.npy"], 0, None),
    ("README.md", "`bellows config keys [--model NAME]`", ["config", "keys", "--model", "lstm"], 0, "model.in_features (int)"),
    ("docs/models.md", "bellows train model.name=transformer",
     ["train", "model.name=transformer", "train.max_steps=2", "--output-dir", "runs"], 0, "the embedded demo of model transformer"),
]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--bellows", required=True)
    ap.add_argument("--source", required=True, help="the repository (README.md and docs/)")
    ap.add_argument("--work", required=True)
    a = ap.parse_args()
    bellows = str(Path(a.bellows).resolve())  # the commands run in the work directory
    work = Path(a.work)
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    np.save(work / "x.npy", np.random.default_rng(0).standard_normal((5, 64), dtype=np.float32))  # the demo's 64 features
    env = dict(os.environ, BELLOWS_CACHE=str(work / "cache"), OMP_WAIT_POLICY="passive")
    failures = []
    for doc, text, args, code, expect in COMMANDS:
        shown = (Path(a.source) / doc).read_text()
        if text not in shown:
            failures.append(f"{doc} no longer shows {text}: update this test with the document")
            continue
        t0 = time.time()
        r = subprocess.run([bellows] + args, cwd=work, env=env, capture_output=True, text=True, timeout=600)
        took = time.time() - t0
        print(f"{doc}: {text} -> bellows {' '.join(args)}: exit {r.returncode} in {took:.1f} s")
        if r.returncode != code:
            failures.append(f"bellows {' '.join(args)} ({doc}): exit {r.returncode}, expected {code}\n{r.stdout[-2000:]}{r.stderr[-2000:]}")
        elif expect is not None and expect not in r.stdout + r.stderr:
            failures.append(f"bellows {' '.join(args)} ({doc}): the output lacks {expect!r}\n{r.stdout[-2000:]}")
        elif args[:2] == ["hw", "--json"]:
            json.loads(r.stdout)
    if not (work / "out.npy").exists():
        failures.append("bellows predict wrote no out.npy")
    elif np.load(work / "out.npy").shape[0] != 5:
        failures.append(f"out.npy has shape {np.load(work / 'out.npy').shape}, expected 5 rows")
    for f in failures:
        print("FAILED:", f, file=sys.stderr)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
