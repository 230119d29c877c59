#!/usr/bin/env bash
# examples/own-model: a model defined in plain PyTorch (model.py: a CNN with BatchNorm and dropout taking an image
# and a scalar feature), scripted with torch.jit.script, trained with `bellows train`, and its trained weights
# loaded back into the Python class (load_state_dict strict) to evaluate. Checks that the training loss halved,
# that bellows' validation accuracy and Python's agree (within 0.02: bellows evaluates in bf16 where precision: auto
# picks it) and that it beats 0.8 (chance 0.25; either input alone 0.5), and that `bellows predict` on the validation
# file gives PyTorch's class probabilities (within 1e-5).
#   run.sh [--quick] [key=value ...]   --quick: 768 training samples, 4 epochs (well under a minute on 2 cores)
source "$(dirname "$0")/../common.sh" "$@"; [ -z "$quick" ] || shift

"$python" -c "import torch, safetensors" 2>/dev/null || { echo "own-model: needs python with torch and safetensors ($python)" >&2; exit 1; }
[ -e "$data/model.pt" ] || "$python" "$here/model.py" prepare "$data" $quick

schedule=()
[ -n "$quick" ] && schedule=(train.epochs=6 train.log_every_n_steps=2 threads=1)
runs="$WORK/runs${quick:+-quick}"
rm -rf "$runs/own-model"
"$BELLOWS_BIN/bellows" train "$here/config.yaml" output_dir="$runs" model.path="$data/model.pt" \
  data.path="$data/train.npz" data.val_path="$data/val.npz" "${schedule[@]}" "$@"

last="$(ls -d "$runs/own-model/checkpoints/step-"* | sort | tail -n 1)"
"$BELLOWS_BIN/bellows" predict "$last" --input "$data/val.npz" --output "$WORK/val-predictions.npy"
python_eval="$("$python" "$here/model.py" evaluate "$data" "$last/model.safetensors" "$WORK/val-predictions.npy")"
"$python" - "$runs/own-model/metrics.jsonl" "$python_eval" <<'PY'
import json, sys
records = [json.loads(line) for line in open(sys.argv[1])]
python_eval = json.loads(sys.argv[2])
train = [r["loss"] for r in records if r.get("type") == "train"]
evals = [r for r in records if r.get("type") == "eval"]
if len(train) < 4 or not evals:
    sys.exit(f"own-model: expected train and eval records in {sys.argv[1]}")
first, last = sum(train[:2]) / 2, sum(train[-2:]) / 2
bellows_acc, python_acc = evals[-1]["accuracy"], python_eval["accuracy"]
print(f"own-model: train loss {first:.3f} -> {last:.3f}; validation accuracy bellows {bellows_acc:.4f}, "
      f"PyTorch with the trained weights {python_acc:.4f} ({python_eval['tensors']} tensors loaded by name); "
      f"bellows predict vs PyTorch probabilities: max abs difference {python_eval['predict_max_abs_diff']:.2g}")
if not (last < 0.5 * first and bellows_acc > 0.8 and abs(bellows_acc - python_acc) <= 0.02
        and python_eval["predict_max_abs_diff"] < 1e-5):
    sys.exit("own-model: FAILED: expected the loss to halve, accuracy above 0.8, the same accuracy in bellows and PyTorch, "
             "and bellows predict's probabilities within 1e-5 of PyTorch's")
print("own-model: OK")
PY
