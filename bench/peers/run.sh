#!/usr/bin/env bash
# bellows side by side with PyTorch eager and torch.compile on the reference workloads (docs/benchmarks.md).
#   bench/peers/run.sh [W1 W2 ...] [--precision fp32 --precision bf16-mixed] [--trials 3] [--steps 60]
#                      [--warmup 10] [--batch-size B] [--quick] [--no-compile] [--out DIR]
# Sets up like scripts/dev.sh (the project's venv with torch, numpy, safetensors), builds what the suite runs
# (the bellows CLI, the example data generator, the bare LibTorch loop), checks that torch.compile works in
# the venv, then runs bench/peers/run.py: per workload a loss-agreement check, then alternating timed trials.
set -euo pipefail
cd "$(dirname "$0")/../.."
./scripts/dev.sh build bellows_cli bellows_example_data bellows_bare_loop >&2
source scripts/setup.sh >/dev/null
"$BELLOWS_PYTHON" - <<'PY' || { echo "bench/peers: torch.compile does not work in $BELLOWS_VENV (see above)" >&2; exit 1; }
import torch, numpy, safetensors
f = torch.compile(lambda x: torch.nn.functional.gelu(x) * 2)
f(torch.ones(4))  # inductor compiles C++ for the CPU: needs g++ and Python's headers
PY
exec "$BELLOWS_PYTHON" bench/peers/run.py "$@"
