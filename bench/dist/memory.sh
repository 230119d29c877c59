#!/usr/bin/env bash
# Tensor memory per rank under ddp, zero1, zero2 and fsdp at 1, 2 and 4 processes (docs/distributed.md).
#   bench/dist/memory.sh [W3 W7] [--ranks 2 --ranks 4] [--out DIR]
set -euo pipefail
cd "$(dirname "$0")/../.."
./scripts/dev.sh build bellows_cli bellows_example_data >&2
source scripts/setup.sh >/dev/null
exec "$BELLOWS_PYTHON" bench/dist/memory.py "$@"
