#!/usr/bin/env bash
# Online training, seed 002 (workload W5 at the size of examples/icon-coupled): samples/s of the training
# sessions that the example's C driver (sim.c) runs through the C API. Sessions 1-3 and 5-8 train on a
# background thread while the simulation steps on (both on this machine's cores); session 4 trains
# synchronously (the simulation waits). Prints each trial's sessions and the medians of both kinds.
#   bench/online/run.sh [--trials N] [key=value ...]     (overrides go to the driver's config, e.g. precision=fp32)
# Needs a build (scripts/dev.sh build): links build/src/capi/libbellows_c.so.
set -euo pipefail
repo="$(cd "$(dirname "$0")/../.." && pwd)"
trials=3
if [ "${1:-}" = "--trials" ]; then trials="$2"; shift 2; fi
build="${BELLOWS_BUILD_DIR:-$repo/build}"
work="$(mktemp -d /tmp/bellows-bench-online.XXXXXX)"
trap 'rm -rf "$work"' EXIT
cc -std=c11 -O2 "$repo/examples/icon-coupled/sim.c" -I"$repo/include" -L"$build/src/capi" -lbellows_c \
  -Wl,-rpath,"$build/src/capi" -lm -o "$work/sim_c"
for t in $(seq 1 "$trials"); do
  rm -rf "$work/runs"
  "$work/sim_c" "$repo/examples/icon-coupled/config.yaml" "$work/runs" 384 online.console=none "$@" > "$work/out-$t.txt"
  cat "$work"/runs/*/metrics.jsonl > "$work/metrics-$t.jsonl"
done
python3 - "$work" "$trials" <<'PY'
import json, re, statistics, sys
work, trials = sys.argv[1], int(sys.argv[2])
background, synchronous = [], []
for t in range(1, trials + 1):
    rows = []
    for line in open(f"{work}/metrics-{t}.jsonl"):
        r = json.loads(line)
        m = re.match(r"online session \d+: (\d+) samples, (\d+) optimizer steps \(step (\d+)\).* ([\d.]+) samples/s", r.get("text", ""))
        if m:
            rows.append((int(m.group(3)), float(m.group(4))))
    rows.sort()
    rates = [rate for _, rate in rows]
    # Sorted by step: the 4th session is the synchronous one before the restart.
    synchronous.append(rates[3])
    background += rates[:3] + rates[4:]
    print(f"trial {t}: sessions (samples/s) {' '.join(f'{r:.0f}' for r in rates)}")
print(f"background sessions: median {statistics.median(background):.0f} samples/s ({len(background)} sessions); "
      f"synchronous: median {statistics.median(synchronous):.0f} samples/s ({len(synchronous)})")
PY
