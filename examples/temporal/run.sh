#!/usr/bin/env bash
# examples/temporal (seed 003): generates the data (a CSV table and an NPY series) once, trains the pipeline
# MLP -> LSTM -> Transformer in one command, and checks that each stage learned: its last evaluation loss
# (MSE on standardised targets; predicting the mean scores about 1) is below the stage's threshold.
#   run.sh [--quick]     --quick: small data and 40 steps per stage (the CI's example.temporal test)
source "$(dirname "$0")/../common.sh" "$@"; [ -z "$quick" ] || shift
ensure_data series.npy features.csv
# The stage configs read data/features.csv and data/series.npy relative to their own directory: copied beside data/.
run_dir="$WORK/run${quick:+-quick}"
rm -rf "$run_dir"
mkdir -p "$run_dir"
ln -s "$data" "$run_dir/data"
cp "$here"/pipeline.yaml "$here"/mlp.yaml "$here"/lstm.yaml "$here"/transformer.yaml "$run_dir/"
cd "$run_dir"

overrides=(output_dir="$run_dir/runs")
# Shortened schedule: every stage trains exactly 40 optimizer steps (epochs high enough that max_steps ends
# each run), warms up over 10 of them, and evaluates at the last one.
if [ -n "$quick" ]; then
  overrides+=(train.epochs=1000 train.max_steps=40 train.eval_every_n_steps=40 schedule.warmup_steps=10
              train.log_every_n_steps=10)
fi
"$BELLOWS_BIN/bellows" train "$run_dir/pipeline.yaml" "${overrides[@]}"

# Each stage's last evaluation loss against its threshold (quick: what 40 steps reach with a wide margin).
if [ -n "$quick" ]; then thresholds="temporal-mlp=0.6 temporal-lstm=0.6 temporal-transformer=0.8"
else thresholds="temporal-mlp=0.1 temporal-lstm=0.25 temporal-transformer=0.25"; fi
"$python" - "$run_dir/runs" $thresholds <<'PY'
import json, sys
runs, failed = sys.argv[1], False
for item in sys.argv[2:]:
    name, limit = item.split("=")
    evals = [r for r in map(json.loads, open(f"{runs}/{name}/metrics.jsonl")) if r.get("type") == "eval"]
    if not evals:
        print(f"{name}: no evaluation in {runs}/{name}/metrics.jsonl"); failed = True; continue
    loss = evals[-1]["loss"]
    ok = loss < float(limit)
    failed |= not ok
    print(f"{name}: eval loss {loss:.4f} at step {evals[-1]['step']} ({'<' if ok else 'NOT <'} {limit})")
sys.exit(1 if failed else 0)
PY
