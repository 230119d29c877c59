#!/usr/bin/env bash
# docs/c_api.md: libbellows_c exports the C API's symbols (bellows_*) and no others (src/capi/bellows_c.map).
# Also libbellows_c_mpi, which has 4. Usage: exports_only_bellows.sh path/to/libbellows_c.so [MIN_SYMBOLS (10)]
set -euo pipefail
min="${2:-10}"
symbols=$(nm -D --defined-only "$1" | awk '{print $3}')
ours=$(grep -c '^bellows_' <<<"$symbols" || true)
others=$(grep -v '^bellows_' <<<"$symbols" || true)
echo "$ours bellows_* symbols exported"
if [ -n "$others" ]; then
  echo "also exported:" >&2
  echo "$others" >&2
  exit 1
fi
[ "$ours" -ge "$min" ] || { echo "expected at least $min of the C API's functions, found $ours" >&2; exit 1; }
