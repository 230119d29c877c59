#!/usr/bin/env bash
# examples/nli-encoder (seed 004, workload W7): the seed's workflow of a frozen, pretrained encoder under a
# trained head, checked with 5-fold cross-validation.
#   1. train the text-pair classifier unfrozen on pretrain.tsv (its SentencePiece vocabulary is trained on that
#      text and cached as spm.model): this is the encoder's "pretraining";
#   2. export its weights with `bellows ckpt export`;
#   3. `bellows cv config.yaml --folds 5 model.encoder_weights=...` on train.tsv (pairs the encoder never saw),
#      with the encoder frozen: each fold trains only the head;
#   4. check that the mean held-out accuracy over the folds beats chance (1/3) by the stated margin.
#   run.sh [--quick]   --quick: fewer pairs and a 2-layer, d 64 model (about 10 s on 2 cores; the full run about 4.5 minutes)
source "$(dirname "$0")/../common.sh" "$@"; [ -z "$quick" ] || shift
ensure_data train.tsv pretrain.tsv
runs="$WORK/runs${quick:+-quick}"
rm -rf "$runs"   # fresh run directories: the check reads this run's results
mkdir -p "$runs"

if [ -n "$quick" ]; then
  # One compute thread: at this size a second one gains little, and on shared cores (CI, several jobs) its
  # spin-waiting made the runs ~40x slower in our measurements.
  sizes=(model.d_model=64 model.heads=4 model.layers=2 model.ff=128 threads=1)
  encoder_schedule=(train.epochs=4 optim.lr=0.001)
  cv_schedule=(train.epochs=6)
  margin=0.25        # mean accuracy must exceed 1/3 + margin
else
  sizes=()           # W7: 4 layers, d 256
  encoder_schedule=(train.epochs=4 optim.lr=0.0005)
  cv_schedule=(train.epochs=10)
  margin=0.30        # measured: 0.727 +- 0.011 (2026-11-22)
fi

# --- 1. the encoder: the classifier trained unfrozen, on other pairs than the cross-validated ones ---
"$BELLOWS_BIN/bellows" train "$here/config.yaml" name=encoder output_dir="$runs" \
  data.path="$data/pretrain.tsv" data.text.tokenizer_cache="$runs/spm.model" \
  model.freeze_encoder=false schedule.warmup_steps=50 "${sizes[@]}" "${encoder_schedule[@]}"

# --- 2. its weights as one safetensors file ("encoder.*" and "head.*"; the head is ignored when importing) ---
"$BELLOWS_BIN/bellows" ckpt export "$runs/encoder" --to "$runs/encoder.safetensors"

# --- 3. 5-fold cross-validation of the head over the frozen encoder, with the encoder's vocabulary ---
"$BELLOWS_BIN/bellows" cv "$here/config.yaml" --folds 5 output_dir="$runs" \
  data.path="$data/train.tsv" data.text.tokenizer="$runs/spm.model" \
  model.encoder_weights="$runs/encoder.safetensors" model.freeze_encoder=true checkpoint.enabled=false \
  "${sizes[@]}" "${cv_schedule[@]}"

# --- 4. the check ---
"$python" - "$runs/nli-encoder/cv.json" "$margin" <<'PY'
import json, sys
cv, margin = json.load(open(sys.argv[1])), float(sys.argv[2])
accuracies = [f["metrics"]["accuracy"] for f in cv["per_fold"]]
chance = 1 / 3
print(f"nli-encoder: held-out accuracy per fold {', '.join(f'{a:.3f}' for a in accuracies)}; "
      f"mean {cv['mean']:.3f} +- {cv['std']:.3f} (sample std, ddof 1) over {cv['folds']} folds; chance {chance:.3f}")
if len(accuracies) != 5 or cv["monitor"] != "accuracy" or not cv["mean"] > chance + margin:
    sys.exit(f"nli-encoder: FAILED: expected 5 folds with mean accuracy above {chance + margin:.3f} (chance + {margin})")
print(f"nli-encoder: OK (mean accuracy above chance + {margin})")
PY
