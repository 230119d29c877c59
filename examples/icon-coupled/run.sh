#!/usr/bin/env bash
# examples/icon-coupled (seed 002 online): a toy simulation in Fortran and in C trains the conditional diffusion
# model through bellows' C API while it runs. This script installs the built bellows into a scratch prefix,
# builds both drivers against the installed package (CMake), and the C driver once more with pkg-config, then:
#   1. sim_f steps 1-192 (sessions on a background thread every 48 steps; the last one synchronously; a checkpoint),
#   2. sim_f steps 193-384 as a second program run, restarted from that checkpoint,
#   3. sim_c (the pkg-config build) steps 1-384 in one run, restarting inside the process half-way,
#   4. the variant whose diffusion model is the user's own TorchScript file (config-scripted.yaml, scripted_ddpm.py):
#      sim_f steps 1-384 and sim_c steps 1-384, the same programs and calls,
#   5. without --quick, the MPI variant: run_mpi.sh (sim_mpi.c, sim_mpi.f90 on 2 and 4 ranks; skipped where there is
#      no MPI),
# and checks that the model's error falls as it trains and ends below the bilinear interpolation's.
#   run.sh [--quick]   --quick: 4 epochs per session instead of 6, and no MPI runs
source "$(dirname "$0")/../common.sh" "$@"; [ -z "$quick" ] || shift
build="$(cd "$BELLOWS_BIN/.." && pwd)"
prefix="$WORK/prefix"
torch_dir="$(sed -n 's/^Torch_DIR:PATH=//p' "$build/CMakeCache.txt")"
rm -rf "$prefix" "$WORK/build" "$WORK/runs"
cmake --install "$build" --prefix "$prefix" >/dev/null
cmake -S "$here" -B "$WORK/build" -G Ninja -DCMAKE_PREFIX_PATH="$prefix" -DTorch_DIR="$torch_dir" >/dev/null
cmake --build "$WORK/build" >/dev/null
PKG_CONFIG_PATH="$prefix/lib/pkgconfig" cc -std=c11 -O2 -Wall -Wextra "$here/sim.c" \
  $(PKG_CONFIG_PATH="$prefix/lib/pkgconfig" pkg-config --cflags --libs bellows) -lm -o "$WORK/sim_c_pkgconfig"

settings=(online.console=none)
[ -n "$quick" ] && settings+=(train.epochs=4)
runs="$WORK/runs"
if [ -x "$WORK/build/sim_f" ]; then
  "$WORK/build/sim_f" "$here/config.yaml" "$runs/fortran" 1 192 "${settings[@]}" | tee "$WORK/fortran-1.txt"
  checkpoint="$(sed -n 's/^checkpoint //p' "$WORK/fortran-1.txt")"
  "$WORK/build/sim_f" "$here/config.yaml" "$runs/fortran" 193 384 "$checkpoint" "${settings[@]}" | tee "$WORK/fortran-2.txt"
  cat "$WORK/fortran-1.txt" "$WORK/fortran-2.txt" > "$WORK/fortran.txt"
else
  echo "icon-coupled: sim_f was not built (no Fortran compiler): the Fortran runs are skipped"
  : > "$WORK/fortran.txt"
fi
"$WORK/sim_c_pkgconfig" "$here/config.yaml" "$runs/c" 384 "${settings[@]}" | tee "$WORK/c.txt"

check_rmse() {
"$python" - "$@" <<'PY'
import sys
failed = False
for path in sys.argv[1:]:
    evals = [line.split() for line in open(path) if line.startswith("eval ")]
    if not evals:
        continue
    name = ("Fortran (two runs)" if "fortran.txt" in path else "Fortran" if "fortran" in path else "C") + (", your own model" if "scripted" in path else "")
    rmse = [float(e[6]) for e in evals]
    baseline = float(evals[-1][8])
    print(f"icon-coupled {name}: model RMSE by session {' '.join(f'{r:.4f}' for r in rmse)}; "
          f"interpolation {baseline:.4f} at the last step")
    if not rmse[-1] < 0.6 * rmse[0]:
        print(f"icon-coupled {name}: FAILED: the error did not fall by 40% ({rmse[0]:.4f} -> {rmse[-1]:.4f})")
        failed = True
    if not rmse[-1] < 0.8 * baseline:
        print(f"icon-coupled {name}: FAILED: the model's RMSE {rmse[-1]:.4f} is not below 0.8 x the interpolation's {baseline:.4f}")
        failed = True
sys.exit(1 if failed else 0)
PY
}
check_rmse "$WORK/fortran.txt" "$WORK/c.txt"

# 4. The variant with a user's model (config-scripted.yaml): scripted_ddpm.py writes a conditional diffusion model
#    in plain PyTorch as TorchScript; the same programs train it through the same calls (model.name: torchscript).
"$python" "$here/scripted_ddpm.py" "$WORK/ddpm.pt"
scripted=(model.path="$WORK/ddpm.pt" "${settings[@]}")
if [ -x "$WORK/build/sim_f" ]; then
  "$WORK/build/sim_f" "$here/config-scripted.yaml" "$runs/fortran-scripted" 1 384 "${scripted[@]}" | tee "$WORK/fortran-scripted.txt"
else
  : > "$WORK/fortran-scripted.txt"
fi
"$WORK/sim_c_pkgconfig" "$here/config-scripted.yaml" "$runs/c-scripted" 384 "${scripted[@]}" | tee "$WORK/c-scripted.txt"
check_rmse "$WORK/fortran-scripted.txt" "$WORK/c-scripted.txt"

# 5. The MPI variant (run_mpi.sh: the grid split among ranks, 2 and 4 ranks, restarts, the equality with one process):
#    in the full run; --quick keeps to one process (CTest runs `run_mpi.sh --quick` as example.icon-coupled-mpi).
if [ -z "$quick" ]; then
  bash "$here/run_mpi.sh"
else
  echo "icon-coupled: the MPI variant is not run with --quick: run_mpi.sh [--quick] (CTest: example.icon-coupled-mpi)"
fi
echo "icon-coupled: OK"
