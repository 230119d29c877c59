#!/usr/bin/env bash
# One entry point for developers and CI: set up (scripts/setup.sh), configure, build, then
#   run   -- build the `bellows` CLI and what it links (not the tests, tools or benchmarks), then run the main
#            job on its embedded default (`bellows train`: the demo); args go to bellows
#   test  -- build everything and run the whole test suite (CTest)
#   build -- only build: everything, or the targets given (scripts/dev.sh build bellows_cli bellows_bare_loop)
# Build directory: $BELLOWS_BUILD_DIR (default: build/ in the clone). ccache's cache lives in $BELLOWS_CACHE.
set -euo pipefail
cd "$(dirname "$0")/.."
mode="${1:-run}"
shift || true
case "$mode" in run|test|build) ;; *) echo "usage: scripts/dev.sh run|test|build [args for bellows or ctest | build targets]" >&2; exit 2 ;; esac

source scripts/setup.sh
build_dir="${BELLOWS_BUILD_DIR:-build}"
jobs="${BELLOWS_JOBS:-$(nproc)}"

configure_args=(-S . -B "$build_dir" -G Ninja
  -DCMAKE_BUILD_TYPE="${BELLOWS_BUILD_TYPE:-RelWithDebInfo}"
  -DCMAKE_PREFIX_PATH="$BELLOWS_TORCH_CMAKE"
  -DCUDAToolkit_ROOT="$CUDAToolkit_ROOT"
  -DBELLOWS_PYTHON="$BELLOWS_PYTHON")
if command -v ccache >/dev/null; then
  configure_args+=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
  # Relative paths and no working directory in the hash: a fresh clone elsewhere reuses the cache.
  export CCACHE_BASEDIR="$PWD" CCACHE_NOHASHDIR=1
  export CCACHE_SLOPPINESS="pch_defines,time_macros,include_file_mtime,include_file_ctime"
  export CCACHE_MAXSIZE="${CCACHE_MAXSIZE:-5G}"
fi
[ -f "$build_dir/build.ninja" ] || cmake "${configure_args[@]}" >&2
targets=()
[ "$mode" = run ] && targets=(--target bellows_cli)
[ "$mode" = build ] && [ $# -gt 0 ] && targets=(--target "$@")
cmake --build "$build_dir" -j "$jobs" "${targets[@]}"

case "$mode" in
  run)  exec "$build_dir/bin/bellows" "${@:-train}" ;;
  test) cd "$build_dir" && exec ctest --output-on-failure -j "$jobs" "$@" ;;
  build) ;;
esac
