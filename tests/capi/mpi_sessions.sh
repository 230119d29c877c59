#!/usr/bin/env bash
# The MPI sessions' cases (tests/capi/mpi_sessions.c says what each mode checks), each in a fresh work folder:
#   mpi_sessions.sh CASE PROGRAM WORK MPIEXEC [MPIEXEC FLAGS...]
# equal:   2 ranks train; one process with both ranks' batches side by side trains the same model (within rounding),
#          and so do 4 ranks against one process with all four
# restart: the 2-rank run continues on 4 ranks, then on 1 (an MPI job of one rank trains alone)
# misuse:  2 ranks call wrongly
# killed:  rank 1 of 2 dies in a background session (two processes of bellows_create_job; no mpiexec)
set -euo pipefail
case_=$1 program=$2 work=$3 mpiexec=$4
shift 4
rm -rf "$work" && mkdir -p "$work"
# The bound: ranks sum their gradients in another order than one process does (measured on the CPU: docs/c_api.md).
tolerance=1e-6
run() { echo "+ $*" >&2; "$@"; }
case "$case_" in
  equal)
    for n in 2 4; do
      run "$mpiexec" -n "$n" "$@" "$program" job "$work/$n"
      run "$program" reference "$work/$n" "$n"
      run "$program" compare "$work/$n/pred-job-$n.bin" "$work/$n/pred-ref-$n.bin" "$tolerance"
    done ;;
  restart)
    run "$mpiexec" -n 2 "$@" "$program" job "$work"
    run "$mpiexec" -n 4 "$@" "$program" restart "$work" 2
    # The run now has 3 sessions; a copy of the 2-rank one goes on with one rank.
    mkdir -p "$work/one" && cp "$work/pred-job-2.bin" "$work/one/"
    run "$mpiexec" -n 2 "$@" "$program" job "$work/one"
    run "$mpiexec" -n 1 "$@" "$program" restart "$work/one" 2 ;;
  misuse)
    run "$mpiexec" -n 2 "$@" "$program" misuse "$work" ;;
  killed)
    port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
    "$program" kill "$work" 1 "$port" & victim=$!
    run "$program" kill "$work" 0 "$port"
    wait "$victim" && { echo "rank 1 was to die of SIGKILL" >&2; exit 1; } || true ;;
  *) echo "unknown case $case_" >&2; exit 2 ;;
esac
echo "1 passed, 0 failed"
