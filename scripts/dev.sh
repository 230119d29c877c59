#!/usr/bin/env bash
# One entry point for developers and CI: set up (scripts/setup.sh), configure, build, then
#   run   -- build the `bellows` CLI and what it links (not the tests, tools or benchmarks), then run the main
#            job on its embedded default (`bellows train`: the demo); args go to bellows
#   test  -- build everything; run the unit suite under AddressSanitizer + UndefinedBehaviorSanitizer (what
#            `sanitize asan` does; BELLOWS_TEST_ASAN=0 skips it) and each fuzz target for 20 s (`fuzz 20`;
#            BELLOWS_TEST_FUZZ=0 skips it); then the whole test suite (CTest)
#   test --quick -- build everything; the unit suites, the house rules and the fast end-to-end suites of what changes
#            most often (the CLI, training, data, bad input, the demos), no sanitizers or fuzzing: the edit-compile-test
#            loop (under 5 minutes with a warm build; README.md says what it took)
#   build -- only build: everything, or the targets given (scripts/dev.sh build bellows_cli bellows_bare_loop)
#   sanitize asan|tsan -- the unit suite under AddressSanitizer + UndefinedBehaviorSanitizer (asan) or
#            ThreadSanitizer (tsan), in build-asan/ or build-tsan/; args after the kind go to ctest
#   fuzz [SECONDS] [TARGET ...] -- the libFuzzer targets of tests/fuzz, each for SECONDS (default 20) from its seed
#            corpus; a table of runs and coverage
# build-asan/ is one Clang build for both the ASan unit suite and the fuzz targets (ASan + UBSan + libFuzzer's
# coverage, fuzzer-no-link): the instrumented library is compiled once, not once with GCC for the unit suite and
# again with Clang for libFuzzer. build-tsan/ is a GCC build.
# Build directory: $BELLOWS_BUILD_DIR (default: build/ in the clone). ccache's cache lives in $BELLOWS_CACHE.
# LibTorch and the C++ libraries: scripts/setup.sh (BELLOWS_TORCH, Torch_DIR, BELLOWS_DEPS_PREFIX; docs/gpu.md).
set -euo pipefail
cd "$(dirname "$0")/.."
mode="${1:-run}"
shift || true
case "$mode" in run|test|build|sanitize|fuzz) ;; *) echo "usage: scripts/dev.sh run|test [--quick]|build|sanitize asan|tsan|fuzz [args for bellows or ctest | build targets]" >&2; exit 2 ;; esac
quick=0
if [ "$mode" = test ] && [ "${1:-}" = --quick ]; then quick=1; shift; fi
sanitizer=""
[ "$mode" = fuzz ] && sanitizer=asan
if [ "$mode" = sanitize ]; then
  sanitizer="${1:-}"
  shift || true
  case "$sanitizer" in asan|tsan) ;; *) echo "usage: scripts/dev.sh sanitize asan|tsan [ctest args]" >&2; exit 2 ;; esac
fi

[ "$mode" = test ] && export BELLOWS_SETUP_TESTS=1   # the tests' packages too (MPI; scripts/setup.sh)
source scripts/setup.sh
build_dir="${BELLOWS_BUILD_DIR:-build}"
jobs="${BELLOWS_JOBS:-$(nproc)}"
[ -n "$sanitizer" ] && build_dir="build-$sanitizer"

configure_args=(-S . -B "$build_dir" -G Ninja
  -DCMAKE_BUILD_TYPE="${BELLOWS_BUILD_TYPE:-RelWithDebInfo}"
  -DCMAKE_PREFIX_PATH="$BELLOWS_PREFIX_PATH"
  -DCUDAToolkit_ROOT="$CUDAToolkit_ROOT"
  -DBELLOWS_PYTHON="$BELLOWS_PYTHON")
# The main build has no compiler warning, and a new one is an error (issue 47); the sanitizer builds (Clang 16 for
# ASan and the fuzz targets, GCC for TSan) are not held to it.
if [ -z "$sanitizer" ]; then configure_args+=(-DBELLOWS_WARNINGS_AS_ERRORS=ON); fi
if command -v ccache >/dev/null; then
  configure_args+=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
  # Relative paths and no working directory in the hash: a fresh clone elsewhere reuses the cache.
  export CCACHE_BASEDIR="$PWD" CCACHE_NOHASHDIR=1
  export CCACHE_SLOPPINESS="pch_defines,time_macros,include_file_mtime,include_file_ctime"
  export CCACHE_MAXSIZE="${CCACHE_MAXSIZE:-5G}"
fi
if [ -n "$sanitizer" ]; then
  # The library and its unit tests (or fuzz targets) only, instrumented; LibTorch is not.
  kinds=address,undefined; [ "$sanitizer" = tsan ] && kinds=thread
  configure_args+=(-DBELLOWS_BUILD_CLI=OFF -DBELLOWS_BUILD_BENCH=OFF -DBELLOWS_BUILD_FORTRAN=OFF -DBELLOWS_BUILD_MPI=OFF)
  if [ "$sanitizer" = asan ]; then
    configure_args+=(-DCMAKE_CXX_COMPILER=clang++-16 -DBELLOWS_SANITIZE=address,undefined,fuzzer-no-link -DBELLOWS_BUILD_FUZZ=ON)
    # No precompiled header under Clang: CMake passes it as `-Xclang -include -Xclang <absolute path>`, which ccache
    # hashes as written (it makes a plain -include relative, not this), so in a clone at another path no library object
    # was served from the cache (a warm fresh clone compiled all 17 batches again: 318 s). Without it a batch compiles
    # ~10 s slower cold (unity_3: 24.6 s against 14.8 s) and is served warm.
    configure_args+=(-DBELLOWS_USE_PCH=OFF)
  else
    configure_args+=(-DBELLOWS_SANITIZE="$kinds")
  fi
fi
# build-asan/ of an older checkout was a GCC build without the fuzz targets: start it afresh.
if [ "$sanitizer" = asan ] && [ -f "$build_dir/CMakeCache.txt" ] && ! grep -qx "BELLOWS_BUILD_FUZZ:BOOL=ON" "$build_dir/CMakeCache.txt"; then
  rm -rf "$build_dir"
fi
# Configured once; again when the LibTorch or library prefix changed (BELLOWS_TORCH, Torch_DIR, BELLOWS_DEPS_PREFIX),
# and for `test` once its packages are installed (a build that `run` configured has not looked for MPI with them).
tests_stamp="$build_dir/.bellows-configured-with-test-packages"
if [ ! -f "$build_dir/build.ninja" ] || ! grep -qxF "CMAKE_PREFIX_PATH:UNINITIALIZED=$BELLOWS_PREFIX_PATH" "$build_dir/CMakeCache.txt" ||
   { [ -z "$sanitizer" ] && ! grep -qx "BELLOWS_WARNINGS_AS_ERRORS:BOOL=ON" "$build_dir/CMakeCache.txt"; } ||
   { [ "$mode" = test ] && [ ! -f "$tests_stamp" ]; }; then
  cmake "${configure_args[@]}" >&2
  if [ "$mode" = test ]; then touch "$tests_stamp"; fi
fi
targets=()
[ "$mode" = run ] && targets=(--target bellows_cli)
[ "$mode" = build ] && [ $# -gt 0 ] && targets=(--target "$@")
[ "$mode" = sanitize ] && targets=(--target bellows_unit_tests)
# The fuzz targets too: build-asan's CTest runs their seeds (fuzz.<name>.seeds).
[ "$sanitizer" = asan ] && targets=(--target bellows_unit_tests bellows_fuzz_targets)
fuzz_seconds=20
if [ "$mode" = fuzz ]; then
  if [[ "${1:-}" =~ ^[0-9]+$ ]]; then fuzz_seconds="$1"; shift; fi
fi
cmake --build "$build_dir" -j "$jobs" "${targets[@]}"

case "$mode" in
  run)  exec "$build_dir/bin/bellows" "${@:-train}" ;;
  test)
    if [ "$quick" = 1 ]; then
      # The quick tier: tests labelled unit (every unit suite) or quick (house.rules), then the fast e2e suites.
      # Both run; the exit code is the first failure's.
      cd "$build_dir"
      rc=0
      ctest --output-on-failure -j "$jobs" -L '^(unit|quick)$' "$@" || rc=$?
      ctest --output-on-failure -j "$jobs" -R '^(Cli|TrainCli|DataCli|DemoCliErrors|EveryModel/DemoCli|BadInput/Catalogue)\.' "$@" || [ "$rc" != 0 ] || rc=$?
      exit "$rc"
    fi
    # The instrumented passes first, the whole suite last (its summary closes the output).
    if [ "${BELLOWS_TEST_ASAN:-1}" != 0 ]; then
      echo "[dev.sh] the unit suite under AddressSanitizer + UndefinedBehaviorSanitizer (build-asan/)" >&2
      "$0" sanitize asan
    fi
    if [ "${BELLOWS_TEST_FUZZ:-1}" != 0 ]; then
      echo "[dev.sh] each fuzz target for 20 s (build-asan/)" >&2
      "$0" fuzz 20
    fi
    cd "$build_dir" && exec ctest --output-on-failure -j "$jobs" "$@" ;;
  sanitize)
    # The runtimes' settings and the suppressions of what is LibTorch's, not ours: tests/sanitizers/ says why.
    supp="$PWD/tests/sanitizers"
    export ASAN_OPTIONS="detect_container_overflow=0:detect_odr_violation=0:allocator_may_return_null=1:detect_leaks=1"
    export LSAN_OPTIONS="suppressions=$supp/lsan.supp:print_suppressions=0"
    export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1:suppressions=$supp/ubsan.supp"
    export TSAN_OPTIONS="suppressions=$supp/tsan.supp:halt_on_error=0:second_deadlock_stack=1:report_signal_unsafe=0:allocator_may_return_null=1"
    # ThreadSanitizer cannot see libgomp's synchronisation: one intra-op thread keeps LibTorch's OpenMP pool idle.
    [ "$sanitizer" = tsan ] && export OMP_NUM_THREADS=1
    cd "$build_dir" && exec ctest --output-on-failure -j "$jobs" "$@" ;;
  fuzz)
    export ASAN_OPTIONS="detect_container_overflow=0:detect_odr_violation=0:allocator_may_return_null=1:detect_leaks=1"
    export LSAN_OPTIONS="suppressions=$PWD/tests/sanitizers/lsan.supp:print_suppressions=0"
    export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1:suppressions=$PWD/tests/sanitizers/ubsan.supp"
    export OMP_NUM_THREADS=1
    exec "$BELLOWS_PYTHON" tests/fuzz/run_fuzz.py --build "$build_dir" --seconds "$fuzz_seconds" "$@" ;;
  build) ;;
esac
