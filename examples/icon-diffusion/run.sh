#!/usr/bin/env bash
# examples/icon-diffusion (seed 002, workload W5): a conditional DDPM learns to "downscale" coarse cells
# (7 context values) to 16x16 fine fields from an NPZ file, then `bellows predict` samples fine fields for
# held-out contexts, and a check compares the samples' mean with the held-out truth against a trivial
# baseline (the training data's mean field, the same for every cell).
#   run.sh [--quick]   --quick: 4,096 training cells and 800 optimizer steps (about 2 minutes on 2 cores)
source "$(dirname "$0")/../common.sh" "$@"; [ -z "$quick" ] || shift
ensure_data train.npz heldout.npz
runs="$WORK/runs${quick:+-quick}"
rm -rf "$runs/icon-diffusion"   # a fresh run directory: the check reads this run's predictions

schedule=()
[ -n "$quick" ] && schedule=(train.epochs=100 train.max_steps=800 schedule.total_steps=800 schedule.warmup_steps=20
                             ema.decay=0.99 checkpoint.every_n_steps=200 train.log_every_n_steps=100)
"$BELLOWS_BIN/bellows" train "$here/config.yaml" output_dir="$runs" data.path="$data/train.npz" "${schedule[@]}"

# 8 samples per held-out context, with the EMA weights of the newest checkpoint.
"$BELLOWS_BIN/bellows" predict "$runs/icon-diffusion" --input "$data/heldout.npz:context" \
  --output "$runs/icon-diffusion/predictions.npy" --samples 8 --seed 0

# The check reads .npy/.npz with the standard library only (no NumPy needed).
"$python" - "$runs/icon-diffusion/predictions.npy" "$data/heldout.npz" "$data/train.npz" <<'PY'
import array, ast, math, struct, sys, zipfile

def parse_npy(raw):
    if raw[:6] != b"\x93NUMPY":
        sys.exit("icon-diffusion: not an .npy file")
    if raw[6] == 1:
        length, start = struct.unpack("<H", raw[8:10])[0], 10
    else:
        length, start = struct.unpack("<I", raw[8:12])[0], 12
    header = ast.literal_eval(raw[start:start + length].decode("latin1"))
    if header["descr"] != "<f4" or header["fortran_order"] or sys.byteorder != "little":
        sys.exit(f"icon-diffusion: expected little-endian float32 in C order, got {header}")
    values = array.array("f")
    values.frombytes(raw[start + length:])
    return tuple(header["shape"]), values

def npz(path, name):
    with zipfile.ZipFile(path) as z:
        return parse_npy(z.read(name + ".npy"))

pred_path, heldout_path, train_path = sys.argv[1:4]
with open(pred_path, "rb") as f:
    (rows, samples, width), pred = parse_npy(f.read())
(held_rows, held_width), fine = npz(heldout_path, "fine")
(_, context_width), _ = npz(heldout_path, "context")
(train_rows, train_width), train = npz(train_path, "fine")
if (rows, width) != (held_rows, held_width) or samples != 8 or context_width != 7:
    sys.exit(f"icon-diffusion: FAILED: predictions {rows}x{samples}x{width} for {held_rows} contexts of 7 values -> {held_width}")
if not all(math.isfinite(v) for v in pred):
    sys.exit("icon-diffusion: FAILED: predictions are not finite")

# Baseline: the training data's mean fine field, the same for every cell.
climatology = [0.0] * width
for r in range(train_rows):
    row = train[r * width:(r + 1) * width]
    climatology = [a + b for a, b in zip(climatology, row)]
climatology = [a / train_rows for a in climatology]

model_sq = base_sq = spread = 0.0
for r in range(rows):
    block = pred[r * samples * width:(r + 1) * samples * width]
    draws = [block[s * width:(s + 1) * width] for s in range(samples)]
    mean = [sum(v) / samples for v in zip(*draws)]
    spread += sum(math.sqrt(sum((x - m) ** 2 for x in v) / (samples - 1)) for v, m in zip(zip(*draws), mean)) / width
    truth = fine[r * width:(r + 1) * width]
    model_sq += sum((m - t) ** 2 for m, t in zip(mean, truth))
    base_sq += sum((c - t) ** 2 for c, t in zip(climatology, truth))
model_rmse = math.sqrt(model_sq / (rows * width))
base_rmse = math.sqrt(base_sq / (rows * width))
print(f"icon-diffusion: {rows} held-out cells x {samples} samples x {width} values; RMSE of the sample mean "
      f"{model_rmse:.4f} vs {base_rmse:.4f} for the training mean field (ratio {model_rmse / base_rmse:.3f}); "
      f"sample spread {spread / rows:.4f} (the data's noise: 0.1)")
if not model_rmse < 0.5 * base_rmse:
    sys.exit("icon-diffusion: FAILED: expected the sample mean's RMSE below half the baseline's")
print("icon-diffusion: OK")
PY
