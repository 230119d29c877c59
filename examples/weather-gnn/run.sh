#!/usr/bin/env bash
# examples/weather-gnn: generate the regional NetCDF file, train the graph network (W6), and check that the
# validation loss fell below a fifth of the first logged training loss. --quick: a 16x16 grid, 64 hours and
# a short schedule (the CI's example.weather-gnn test). Arguments after it (key=value) go to bellows train.
source "$(dirname "$0")/../common.sh" "$@"; [ -z "$quick" ] || shift
schedule=()
if [ -n "$quick" ]; then
  # One compute thread: the 16x16 graph's operations are too small to share between cores, and on a busy
  # machine a second thread mostly spins.
  schedule=(train.epochs=4 train.log_every_n_steps=5 schedule.warmup_steps=10 threads=1)
fi
ensure_data regional_weather.nc
runs="$WORK/runs${quick:+-quick}"
rm -rf "$runs/weather-gnn"
# Further key=value arguments go to bellows train (e.g. model.latent_size=256 model.num_gnn_layers=12).
"$BELLOWS_BIN/bellows" train "$here/config.yaml" output_dir="$runs" data.path="$data/regional_weather.nc" "${schedule[@]}" "$@"

# The check: the last evaluation's loss is below 1/5 of the first logged training loss.
"$python" - "$runs/weather-gnn/metrics.jsonl" <<'PY'
import json, sys
records = [json.loads(line) for line in open(sys.argv[1])]
train = [r["loss"] for r in records if r.get("type") == "train" and "loss" in r]
evals = [r["loss"] for r in records if r.get("type") == "eval" and "loss" in r]
if not train or not evals:
    sys.exit(f"weather-gnn: no training or evaluation losses in {sys.argv[1]}")
first, final = train[0], evals[-1]
factor = 5.0
print(f"weather-gnn: first training loss {first:.4f}, final validation loss {final:.4f} (needs < first / {factor:g})")
if not final < first / factor:
    sys.exit("weather-gnn: FAILED: the validation loss did not fall enough")
print("weather-gnn: OK")
PY
