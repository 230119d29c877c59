#!/usr/bin/env bash
# `bellows bench --matrix` on W1-W4 (../shared/WORKLOADS.md: the example configs on their generated data), one
# after another: each workload's table (table.txt), matrix.json, matrix.svg and matrix.png in OUT/<W>/, and the
# machine's `bellows hw` in OUT/hw.txt. docs/benchmarks.md shows the results.
#   bench/plan/matrix.sh [OUT] [--rounds N] [--trial-seconds S]     (default OUT: build/matrix; 3 rounds of 3 s)
set -euo pipefail
repo="$(cd "$(dirname "$0")/../.." && pwd)"
bin="${BELLOWS_BIN:-$repo/build/bin}"
out="$repo/build/matrix"
if [ $# -gt 0 ] && [ "${1#--}" = "$1" ]; then out="$(realpath -m "$1")"; shift; fi
work="${BELLOWS_BENCH_WORK:-/tmp/bellows-plan-bench}"
mkdir -p "$out"
"$bin/bellows" hw > "$out/hw.txt"
for spec in W1:temporal:examples/temporal/mlp.yaml:features.csv W2:temporal:examples/temporal/lstm.yaml:series.npy \
            W3:temporal:examples/temporal/transformer.yaml:series.npy W4:cape-resnet:examples/cape-resnet/config.yaml:train; do
  IFS=: read -r w example config marker <<< "$spec"
  [ -e "$work/$example/data/$marker" ] || "$bin/bellows_example_data" "$example" "$work/$example/data"
  mkdir -p "$out/$w"
  echo "$w: bellows bench $config --matrix $*" >&2
  (cd "$work/$example" && "$bin/bellows" bench "$repo/$config" --matrix --out "$out/$w" "$@" > "$out/$w/table.txt" 2> "$out/$w/trials.log")
  cat "$out/$w/table.txt"
done
