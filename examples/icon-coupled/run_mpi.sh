#!/usr/bin/env bash
# examples/icon-coupled, the MPI variant: sim_mpi.c and sim_mpi.f90 split the toy simulation's 8 x 8 coarse grid among
# MPI ranks and train one model across the training ranks (bellows_create_mpi). This script installs the built bellows
# into a scratch prefix, builds both against it (CMake: bellows::bellows_c_mpi, bellows::bellows_fortran_mpi), then:
#   1. C: 2 ranks, both training, steps 1-192 (sessions in the background every 48 steps; the last one synchronously;
#      a checkpoint), then 4 ranks, all training, steps 193-384 continuing that run (resume=auto): 2 -> 4 training ranks,
#   2. Fortran: 4 ranks, ranks 0 and 1 training and fed by ranks 2 and 3, steps 1-192; then 2 ranks, steps 193-384,
#      restoring the checkpoint on every training rank (bellows_restore),
#   3. equality: config-equal.yaml (a regression MLP, no noise drawn): the weights of 2 ranks (C) and of 4 ranks with 2
#      training (Fortran) against one process that pushed the training ranks' samples batch by batch
#      (sim_mpi_c --reference), compared tensor by tensor (bellows ckpt export, safetensors),
# and checks that the model's error falls as it trains, ends below the bilinear interpolation's, and the equality bound.
#   run_mpi.sh [--quick]   --quick: 4 epochs per session instead of 6 (CTest's example.icon-coupled-mpi)
#   run_mpi.sh --measure   samples/s per training rank at 1, 2 and 4 training ranks and the time a step waits in
#                          bellows_push_block (the README's table); no checks
# Skipped, with a message, where there is no mpirun or the build has no MPI variant (no MPI, or bellows without it).
source "$(dirname "$0")/../common.sh" "$@"; [ -z "$quick" ] || shift
measure=""
[ "${1:-}" = "--measure" ] && measure=1
work="$WORK/mpi"
mpirun="${MPIEXEC:-$(command -v mpirun || command -v mpiexec || true)}"
if [ -z "$mpirun" ]; then
  echo "icon-coupled MPI: SKIPPED: no mpirun or mpiexec on PATH (or MPIEXEC)"
  exit 0
fi

build="$(cd "$BELLOWS_BIN/.." && pwd)"
prefix="$work/prefix"
torch_dir="$(sed -n 's/^Torch_DIR:PATH=//p' "$build/CMakeCache.txt")"
rm -rf "$work"
cmake --install "$build" --prefix "$prefix" >/dev/null
cmake -S "$here" -B "$work/build" -G Ninja -DCMAKE_PREFIX_PATH="$prefix" -DTorch_DIR="$torch_dir" >"$work/cmake.log" 2>&1 ||
  { cat "$work/cmake.log"; exit 1; }
cmake --build "$work/build" >/dev/null
if [ ! -x "$work/build/sim_mpi_c" ]; then
  echo "icon-coupled MPI: SKIPPED: sim_mpi_c was not built (no MPI for C, or bellows was built without its MPI layer)"
  exit 0
fi

# Open MPI: more ranks than cores need --oversubscribe, and root (containers, CI) the two ALLOW variables. --bind-to
# none: a rank runs several threads (its simulation, bellows' compute thread and LibTorch's); Open MPI binds each rank
# of a job of 1 or 2 to one core, where 1 rank with 2 threads trained at 23-27k samples/s against 36-38k unbound (README).
flags=()
if "$mpirun" --version 2>/dev/null | grep -qiE "open ?mpi|openrte|open-mpi"; then  # mpiexec says OpenRTE
  flags+=(--oversubscribe --bind-to none)
  if [ "$(id -u)" = 0 ]; then export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1; fi
fi
cores="$(nproc)"
# mpirun_ranks N PROGRAM ARGS...: N ranks, each with the cores / N threads for LibTorch (at least one).
mpirun_ranks() {
  local n=$1
  shift
  "$mpirun" -n "$n" "${flags[@]}" "$@" threads=$(( cores / n > 0 ? cores / n : 1 ))
}
runs="$work/runs"
settings=(online.console=none)
[ -n "$quick" ] && settings+=(train.epochs=4)

if [ -n "$measure" ]; then
  # --- the README's table: the ddpm config, steps 1-240 at 1, 2 and 4 training ranks: sessions 1-4 train in the
  #     background while the ranks step on, session 5 synchronously; each session's speed is rank 0's metrics.jsonl
  #     record (samples of every rank over the session's training time), divided by the ranks ---
  echo "icon-coupled MPI measure: $(lscpu | sed -n 's/^Model name: *//p'), $cores cores, $(date -u +%Y-%m-%d)"
  for n in 1 2 4; do
    mpirun_ranks "$n" "$work/build/sim_mpi_c" "$here/config.yaml" "$runs/measure-$n" 1 240 "$n" "${settings[@]}" | tee "$work/measure-$n.txt"
  done
  "$python" - "$work" "$runs" <<'PY'
import json, re, statistics, sys
work, runs = sys.argv[1:]
print("| training ranks | samples/s per rank, background sessions 1-4 | median | synchronous session 5 | all ranks (median background) "
      "| push wait per step during a session: mean, max | without a session: mean, max |")
print("|---|---|---|---|---|---|---|")
for n in (1, 2, 4):
    sessions = []
    for line in open(f"{runs}/measure-{n}/icon-coupled/metrics.jsonl"):
        text = json.loads(line).get("text", "")
        m = re.match(r"online session \d+: .*, ([\d.]+) samples/s, [\d.]+ s$", text)
        if m:
            sessions.append(float(m.group(1)) / n)
    wait = re.search(r"during a session (\d+) us mean, (\d+) us max .*without one (\d+) us mean, (\d+) us max",
                     open(f"{work}/measure-{n}.txt").read()).groups()
    background = statistics.median(sessions[:4])
    print(f"| {n} | {', '.join(f'{s:.0f}' for s in sessions[:4])} | {background:.0f} | {sessions[4]:.0f} | {background * n:.0f} "
          f"| {wait[0]} us, {wait[1]} us | {wait[2]} us, {wait[3]} us |")
PY
  exit 0
fi

# --- 1. C: 2 training ranks, then the run goes on at 4 ---
mpirun_ranks 2 "$work/build/sim_mpi_c" "$here/config.yaml" "$runs/c" 1 192 2 "${settings[@]}" | tee "$work/c-1.txt"
mpirun_ranks 4 "$work/build/sim_mpi_c" "$here/config.yaml" "$runs/c" 193 384 4 resume=auto "${settings[@]}" | tee "$work/c-2.txt"
cat "$work/c-1.txt" "$work/c-2.txt" > "$work/c.txt"

# --- 2. Fortran: 4 ranks, 2 of them training (each fed by one other), then 2 ranks restoring the checkpoint ---
if [ -x "$work/build/sim_mpi_f" ]; then
  mpirun_ranks 4 "$work/build/sim_mpi_f" "$here/config.yaml" "$runs/fortran" 1 192 2 "${settings[@]}" | tee "$work/fortran-1.txt"
  checkpoint="$(sed -n 's/^checkpoint //p' "$work/fortran-1.txt")"
  mpirun_ranks 2 "$work/build/sim_mpi_f" "$here/config.yaml" "$runs/fortran" 193 384 2 "$checkpoint" "${settings[@]}" |
    tee "$work/fortran-2.txt"
  cat "$work/fortran-1.txt" "$work/fortran-2.txt" > "$work/fortran.txt"
else
  echo "icon-coupled MPI: sim_mpi_f was not built (no Fortran compiler, no mpi_f08, or no bellows_fortran_mpi): the Fortran runs are skipped"
  : > "$work/fortran.txt"
fi

"$python" - "$work/c.txt" "$work/fortran.txt" <<'PY'
import sys
failed = False
for path, name in zip(sys.argv[1:], ("C, 2 then 4 training ranks", "Fortran, 4 ranks (2 training) then 2")):
    evals = [line.split() for line in open(path) if line.startswith("eval ")]
    if not evals:
        continue
    rmse = [float(e[6]) for e in evals]
    baseline = float(evals[-1][8])
    print(f"icon-coupled MPI {name}: model RMSE by session {' '.join(f'{r:.4f}' for r in rmse)}; interpolation {baseline:.4f} at the last step")
    if not rmse[-1] < 0.6 * rmse[0]:
        print(f"icon-coupled MPI {name}: FAILED: the error did not fall by 40% ({rmse[0]:.4f} -> {rmse[-1]:.4f})")
        failed = True
    if not rmse[-1] < 0.8 * baseline:
        print(f"icon-coupled MPI {name}: FAILED: the model's RMSE {rmse[-1]:.4f} is not below 0.8 x the interpolation's {baseline:.4f}")
        failed = True
sys.exit(1 if failed else 0)
PY

# --- 3. equality: a job's weights against one process with its training ranks' samples, batch by batch ---
if ! "$python" -c "import numpy, safetensors" 2>/dev/null; then
  echo "icon-coupled MPI: $python has no numpy or safetensors (set BELLOWS_PYTHON): the equality check is skipped"
  echo "icon-coupled MPI: OK"
  exit 0
fi
equal=("$here/config-equal.yaml")
# The bound: ranks sum their gradients in another order than one process does; measured up to 1.4e-6 (README).
tolerance=1e-5
compare() {  # compare NAME JOB_RUN_DIR REFERENCE_RUN_DIR
  "$BELLOWS_BIN/bellows" ckpt export "$2" --to "$2.safetensors" >/dev/null
  "$BELLOWS_BIN/bellows" ckpt export "$3" --to "$3.safetensors" >/dev/null
  "$python" - "$1" "$2.safetensors" "$3.safetensors" "$tolerance" <<'PY'
import sys
import numpy as np
from safetensors.numpy import load_file
name, job, ref, tolerance = sys.argv[1], load_file(sys.argv[2]), load_file(sys.argv[3]), float(sys.argv[4])
assert sorted(job) == sorted(ref), f"different tensors: {sorted(job)} and {sorted(ref)}"
# Per tensor: the largest difference relative to the tensor's largest value; the worst tensor's.
worst = max((np.abs(job[k].astype(np.float64) - ref[k]).max() / np.abs(ref[k].astype(np.float64)).max(), k) for k in ref)
print(f"icon-coupled MPI equality, {name}: max relative difference {worst[0]:.3g} ({worst[1]}; {len(ref)} tensors; tolerance {tolerance:g})")
sys.exit(0 if worst[0] <= tolerance else 1)
PY
}
mpirun_ranks 2 "$work/build/sim_mpi_c" "${equal[@]}" "$runs/equal-2" 1 96 2 | grep -v "^eval"
"$work/build/sim_mpi_c" --reference 2 "${equal[@]}" "$runs/equal-2-reference" 1 96 2 threads=1 | grep -v "^eval"
compare "C, 2 training ranks" "$runs/equal-2/icon-coupled-equal" "$runs/equal-2-reference/icon-coupled-equal"
if [ -x "$work/build/sim_mpi_f" ]; then
  mpirun_ranks 4 "$work/build/sim_mpi_f" "${equal[@]}" "$runs/equal-4" 1 96 2 | grep -v "^eval"
  "$work/build/sim_mpi_c" --reference 4 "${equal[@]}" "$runs/equal-4-reference" 1 96 2 threads=1 | grep -v "^eval"
  compare "Fortran, 4 ranks (2 training, each fed by one)" "$runs/equal-4/icon-coupled-equal" "$runs/equal-4-reference/icon-coupled-equal"
fi
echo "icon-coupled MPI: OK"
