#!/usr/bin/env bash
# Data parallel on one machine: 2 processes x 1 thread against 1 process x 2 threads (docs/distributed.md).
#   bench/dist/run.sh [W1 W3] [--trials 3] [--bucket-mb 25 --bucket-mb 1] [--zero1] [--zero2] [--out DIR]
set -euo pipefail
cd "$(dirname "$0")/../.."
./scripts/dev.sh build bellows_cli bellows_example_data >&2
source scripts/setup.sh >/dev/null
exec "$BELLOWS_PYTHON" bench/dist/run.py "$@"
