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

# The variant with a Hugging Face encoder (config-hf.yaml): a BERT-style classifier from `transformers`, traced
# with torchscript=True (hf_encoder.py: random weights from a fixed seed, nothing downloaded), fine-tuned whole by
# bellows on train.tsv with the vocabulary above; then its trained weights go back into the `transformers` class,
# whose class probabilities on probe pairs must equal bellows predict's. Skipped, and said, without transformers.
hf="$runs/hf"
set +e
"$python" "$here/hf_encoder.py" prepare "$hf"
status=$?
set -e
if [ "$status" = 3 ]; then
  echo "nli-encoder: the Hugging Face variant is skipped: the Python of the tests ($python) has no transformers"
  exit 0
fi
[ "$status" = 0 ] || exit "$status"
hf_schedule=(train.epochs=6)
[ -n "$quick" ] && hf_schedule=(train.epochs=4 threads=1)
"$BELLOWS_BIN/bellows" train "$here/config-hf.yaml" output_dir="$runs" model.path="$hf/hf.pt" \
  data.path="$data/train.tsv" data.text.tokenizer="$runs/spm.model" "${hf_schedule[@]}"
"$BELLOWS_BIN/bellows" predict "$runs/nli-hf" --input "$hf/probe.npz" --output "$hf/probe-predictions.npy"
compared="$("$python" "$here/hf_encoder.py" compare "$hf" "$(ls -d "$runs/nli-hf/checkpoints/step-"* | tail -n 1)/model.safetensors" \
  "$hf/probe-predictions.npy")"
"$python" - "$runs/nli-hf/metrics.jsonl" "$compared" "$margin" <<'PY'
import json, sys
records = [json.loads(line) for line in open(sys.argv[1])]
compared, margin = json.loads(sys.argv[2]), float(sys.argv[3])
accuracy = [r for r in records if r.get("type") == "eval"][-1]["accuracy"]
print(f"nli-encoder (Hugging Face BERT, traced): validation accuracy {accuracy:.3f}; weights back in transformers' class "
      f"({compared['tensors']} tensors; TorchScript-only buffers {compared['unexpected']}): class probabilities differ from "
      f"bellows predict's by at most {compared['max_abs_diff']:.2g}")
if not (accuracy > 1 / 3 + margin / 2 and compared["max_abs_diff"] < 1e-5):
    sys.exit(f"nli-encoder: FAILED: expected validation accuracy above {1 / 3 + margin / 2:.3f} and probabilities within 1e-5")
print("nli-encoder: Hugging Face variant OK")
PY
