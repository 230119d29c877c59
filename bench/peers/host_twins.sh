#!/usr/bin/env bash
# Host-bound twins (issue 43): bellows' per-step host cost against PyTorch eager's on the CPU, one thread, for the
# twins of W1, W3, W4 and W5 (bench/peers/host_twins.py; docs/benchmarks.md).
#   bench/peers/host_twins.sh [W1 W3 W4 W5] [--trials 3] [--steps 800] [--warmup 100] [--window 10] [--out DIR]
# Does not build: it runs build/bin/bellows and build/bin/bellows_example_data as they are (scripts/dev.sh build
# bellows_cli bellows_example_data first). Finds the project's Python (torch, numpy, safetensors) as run.sh does.
set -euo pipefail
cd "$(dirname "$0")/../.."
for tool in build/bin/bellows build/bin/bellows_example_data; do
  [[ -x "$tool" ]] || { echo "bench/peers/host_twins.sh: $tool is missing: build it first (scripts/dev.sh build bellows_cli bellows_example_data)" >&2; exit 1; }
done
source scripts/setup.sh >/dev/null
exec "$BELLOWS_PYTHON" bench/peers/host_twins.py "$@"
