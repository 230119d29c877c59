#!/usr/bin/env bash
# Installs everything bellows builds against, idempotently: Debian -dev packages (apt), LibTorch from the
# pinned PyPI `torch` wheel in a virtual environment kept in a cache outside the clone, and a ccache dir.
# Source it (`. scripts/setup.sh`) to get BELLOWS_* variables, or run it to install and print them; with
# BELLOWS_SETUP_TESTS=1 it also installs the tests' packages (BELLOWS_APT_TEST_PACKAGES; scripts/dev.sh test does).
#
# Where a machine already has what bellows needs (docs/gpu.md):
#   BELLOWS_TORCH=/path/to/python   use the torch that this Python imports (2.11 to 2.13, C++11 ABI, its CUDA
#                                   matching the toolkit's major version) instead of installing one; nothing is
#                                   installed into that Python
#   Torch_DIR=/path/to/share/cmake/Torch   a LibTorch's CMake config (a libtorch zip, a source build)
#   BELLOWS_DEPS_PREFIX=/path       the C++ libraries in a prefix instead of apt (scripts/pack_deps.sh makes one
#                                   from Debian's packages, for a machine with no package registry)
set -euo pipefail

BELLOWS_TORCH_VERSION=2.13.0        # pinned: its CUDA (13.0) matches the toolkit's major version
BELLOWS_CUDA_MAJOR=13
BELLOWS_TORCH_SUPPORTED="2.11 2.12 2.13"  # the minor versions bellows builds against (guards in the code say where they differ)
BELLOWS_PY_EXTRAS=(numpy==2.4.6 jsonschema==4.26.0 safetensors==0.8.0 tensorboard==2.21.0 lizard==1.24.3)   # golden generators, schema checks, event-file round trip, function lengths (scripts/house.py)
# Optional test dependencies: installed where pip can, else the tests that use them say so and skip.
# transformers: the nli-encoder example's Hugging Face variant (4.57 is the last line with torchscript=True tracing).
# torchvision, timm: the newcomer walk (tests/e2e/newcomer_walk.py) scripts their ResNet-18 and MobileNetV3 and trains them.
BELLOWS_PY_OPTIONAL=(transformers==4.57.6 torchvision==0.28.0 timm==1.0.31)
BELLOWS_APT_PACKAGES=(cmake ninja-build g++ gfortran ccache pkg-config python3-venv
  libyaml-cpp-dev libcli11-dev libgloo-dev nlohmann-json3-dev libgtest-dev libgmock-dev libbenchmark-dev
  libnetcdf-dev libpng-dev libjpeg62-turbo-dev zlib1g-dev libssl-dev libsentencepiece-dev libcairo2-dev
  clang-16 libclang-rt-16-dev)   # Clang 16 and its compiler-rt (libFuzzer): scripts/dev.sh fuzz (Clang 14 lacks std::source_location)
# The tests' own Debian packages, installed only where the tests will run (BELLOWS_SETUP_TESTS=1: `scripts/dev.sh
# test` sets it): MPI, for libbellows_c_mpi, the Fortran module bellows_mpi and their tests (mpiexec). A build
# without them has no MPI layer and says so; `run` does not need it.
BELLOWS_APT_TEST_PACKAGES=(libopenmpi-dev openmpi-bin)

export BELLOWS_CACHE="${BELLOWS_CACHE:-$HOME/.cache/bellows}"
export CCACHE_DIR="${CCACHE_DIR:-$BELLOWS_CACHE/ccache}"
export CUDAToolkit_ROOT="${CUDAToolkit_ROOT:-/usr/local/cuda}"

say() { printf '[setup] %s\n' "$*" >&2; }
die() { printf '[setup] error: %s\n' "$*" >&2; exit 1; }

install_apt_packages() {
  local wanted=("${BELLOWS_APT_PACKAGES[@]}") missing=()
  [ "${BELLOWS_SETUP_TESTS:-0}" = 1 ] && wanted+=("${BELLOWS_APT_TEST_PACKAGES[@]}")
  for p in "${wanted[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
  done
  [ ${#missing[@]} -eq 0 ] && return 0
  command -v apt-get >/dev/null || die "these Debian packages are missing and there is no apt-get: ${missing[*]}. Build with
  BELLOWS_DEPS_PREFIX=<prefix> (scripts/pack_deps.sh makes one on a machine that has apt; docs/gpu.md)"
  say "installing Debian packages: ${missing[*]}"
  local sudo=""; [ "$(id -u)" -eq 0 ] || sudo="sudo"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
}

# The C++ libraries from a prefix of unpacked packages (scripts/pack_deps.sh): CMake, pkg-config, the compiler
# and the linker look there first; the programs built find the libraries through LD_LIBRARY_PATH.
use_deps_prefix() {
  local prefix; prefix=$(cd "$BELLOWS_DEPS_PREFIX" 2>/dev/null && pwd) || die "BELLOWS_DEPS_PREFIX=$BELLOWS_DEPS_PREFIX is not a directory"
  [ -f "$prefix/usr/include/yaml-cpp/yaml.h" ] || die "BELLOWS_DEPS_PREFIX=$prefix holds no usr/include/yaml-cpp/yaml.h: not a prefix made by scripts/pack_deps.sh"
  local lib="$prefix/usr/lib/x86_64-linux-gnu"
  export BELLOWS_DEPS_PREFIX="$prefix"
  export BELLOWS_EXTRA_PREFIX_PATH="$prefix/usr;$lib/cmake"
  # .pc files say prefix=/usr: the sysroot puts the prefix in front of their -I and -L paths.
  export PKG_CONFIG_PATH="$lib/pkgconfig:$prefix/usr/share/pkgconfig${PKG_CONFIG_PATH:+:$PKG_CONFIG_PATH}"
  export PKG_CONFIG_SYSROOT_DIR="$prefix"
  export CPATH="$prefix/usr/include${CPATH:+:$CPATH}"
  export LIBRARY_PATH="$lib${LIBRARY_PATH:+:$LIBRARY_PATH}"
  # Also what GNU ld searches for the libraries that the linked libraries need (libnetcdf's libhdf5).
  export LD_LIBRARY_PATH="$lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
}

toolkit_major() {
  local nvcc="$CUDAToolkit_ROOT/bin/nvcc"
  [ -x "$nvcc" ] || return 1
  "$nvcc" --version | sed -n 's/.*release \([0-9]*\)\..*/\1/p'
}

check_cuda_toolkit() {  # $1: the CUDA major version LibTorch was built with ("" for a CPU-only LibTorch)
  [ -n "$1" ] || return 0
  local v; v=$(toolkit_major) || die "no CUDA toolkit at $CUDAToolkit_ROOT (nvcc missing); a CUDA LibTorch's CMake config needs one. Set CUDAToolkit_ROOT."
  [ "$v" = "$1" ] || die "the CUDA toolkit at $CUDAToolkit_ROOT is CUDA $v; this torch was built with CUDA $1. Set CUDAToolkit_ROOT to a CUDA $1.x toolkit."
}

# Prints "<version> <cxx11 abi 0|1> <cuda version or none> <cmake prefix>" for the torch that Python $1 imports.
describe_torch() {
  "$1" - <<'PY' 2>/dev/null
import warnings
warnings.filterwarnings("ignore")
import torch, torch.utils
print(torch.__version__.split("+")[0], int(torch.compiled_with_cxx11_abi()), torch.version.cuda or "none", torch.utils.cmake_prefix_path)
PY
}

# The checks every torch gets, from the words describe_torch printed.
check_torch() {  # $1: where it came from, $2 version, $3 abi, $4 cuda
  local minor; minor=$(echo "$2" | cut -d. -f1,2)
  [[ " $BELLOWS_TORCH_SUPPORTED " == *" $minor "* ]] || die "$1 has torch $2; bellows builds against torch $BELLOWS_TORCH_SUPPORTED"
  [ "$3" = 1 ] || die "$1 has torch $2 built with the old C++ ABI (_GLIBCXX_USE_CXX11_ABI=0); bellows needs the C++11 ABI (every PyPI wheel since 2.7 has it)"
  [ "$4" = none ] || check_cuda_toolkit "${4%%.*}"
}

verify_pinned_torch() {
  local words; words=$(describe_torch "$BELLOWS_PYTHON") || return 1
  set -- $words
  [ "$1" = "$BELLOWS_TORCH_VERSION" ] && [ "$2" = 1 ] && [ "${3%%.*}" = "$BELLOWS_CUDA_MAJOR" ]
}

# The verification result is remembered in a stamp file naming the pins, so later runs skip the slow import.
stamp_text() { printf '%s\n' "torch==$BELLOWS_TORCH_VERSION" "cuda=$BELLOWS_CUDA_MAJOR" "${BELLOWS_PY_EXTRAS[@]}" "${BELLOWS_PY_OPTIONAL[@]}"; }

install_pinned_torch() {
  export BELLOWS_VENV="$BELLOWS_CACHE/torch-$BELLOWS_TORCH_VERSION"
  export BELLOWS_PYTHON="$BELLOWS_VENV/bin/python"
  check_cuda_toolkit "$BELLOWS_CUDA_MAJOR"
  local stamp="$BELLOWS_VENV/.bellows-verified"
  if ! { [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$(stamp_text)" ] && [ -x "$BELLOWS_PYTHON" ]; }; then
    if ! { [ -x "$BELLOWS_PYTHON" ] && verify_pinned_torch; }; then
      say "installing torch==$BELLOWS_TORCH_VERSION into $BELLOWS_VENV (a few GB, once per machine)"
      mkdir -p "$BELLOWS_CACHE"
      python3 -m venv "$BELLOWS_VENV"
      "$BELLOWS_VENV/bin/pip" install -q --progress-bar off --disable-pip-version-check \
        "torch==$BELLOWS_TORCH_VERSION" "${BELLOWS_PY_EXTRAS[@]}"
      verify_pinned_torch || die "torch in $BELLOWS_VENV failed verification (version $BELLOWS_TORCH_VERSION, C++11 ABI, CUDA $BELLOWS_CUDA_MAJOR)"
    fi
    install_py_extras "$BELLOWS_VENV/bin/pip"
    stamp_text > "$stamp"
  fi
  BELLOWS_TORCH_CMAKE=$(echo "$BELLOWS_VENV"/lib/python3*/site-packages/torch/share/cmake)
}

install_py_extras() {  # $1: pip
  local missing=()
  for req in "${BELLOWS_PY_EXTRAS[@]}"; do
    "$1" show -q "${req%%==*}" >/dev/null 2>&1 || missing+=("$req")
  done
  [ ${#missing[@]} -eq 0 ] || "$1" install -q --progress-bar off --disable-pip-version-check "${missing[@]}"
  for req in "${BELLOWS_PY_OPTIONAL[@]}"; do
    "$1" show -q "${req%%==*}" >/dev/null 2>&1 ||
      "$1" install -q --progress-bar off --disable-pip-version-check "$req" >/dev/null 2>&1 ||
      say "note: $req could not be installed; the tests that use it skip"
  done
}

# The Python of BELLOWS_TORCH imports torch; the tests' Python packages (numpy, jsonschema, safetensors,
# tensorboard) are used from it when it has them, else from a virtual environment over it that gets them, where
# pip can reach a registry. Without them the build and `bellows` work; the tests that use them fail.
use_existing_python() {
  [ -x "$BELLOWS_TORCH" ] || die "BELLOWS_TORCH=$BELLOWS_TORCH is not an executable Python"
  local words; words=$(describe_torch "$BELLOWS_TORCH") || die "BELLOWS_TORCH=$BELLOWS_TORCH cannot import torch"
  set -- $words
  check_torch "BELLOWS_TORCH=$BELLOWS_TORCH" "$1" "$2" "$3"
  BELLOWS_TORCH_CMAKE="$4"
  export BELLOWS_PYTHON="$BELLOWS_TORCH"
  local names=(); for req in "${BELLOWS_PY_EXTRAS[@]}"; do names+=("${req%%==*}"); done
  if "$BELLOWS_TORCH" -c "import ${names[*]// /,}" 2>/dev/null; then return 0; fi
  export BELLOWS_VENV="$BELLOWS_CACHE/py-over-$(echo "$BELLOWS_TORCH" | md5sum | cut -c1-12)"
  if [ ! -x "$BELLOWS_VENV/bin/python" ]; then
    "$BELLOWS_TORCH" -m venv --system-site-packages "$BELLOWS_VENV" || die "cannot make a virtual environment over $BELLOWS_TORCH in $BELLOWS_VENV"
    # --system-site-packages reaches the base interpreter's packages, not those of a virtual environment that
    # BELLOWS_TORCH may be: a .pth file names the folder torch is imported from.
    local torch_site; torch_site=$("$BELLOWS_TORCH" -c 'import os, torch; print(os.path.dirname(os.path.dirname(torch.__file__)))')
    "$BELLOWS_VENV/bin/python" -c 'import sys, sysconfig; open(sysconfig.get_paths()["purelib"] + "/bellows-torch.pth", "w").write(sys.argv[1] + "\n")' "$torch_site"
  fi
  if install_py_extras "$BELLOWS_VENV/bin/pip" >/dev/null 2>&1; then
    export BELLOWS_PYTHON="$BELLOWS_VENV/bin/python"
  else
    say "warning: ${names[*]} could not be installed (no package registry?): the build and bellows work; the tests that use them fail"
  fi
}

# A LibTorch by its CMake config: the version from TorchConfigVersion.cmake; the ABI and CUDA are checked by
# CMake (cmake/BellowsDependencies.cmake). The tests' Python is the system's python3.
use_torch_dir() {
  [ -f "$Torch_DIR/TorchConfig.cmake" ] || die "Torch_DIR=$Torch_DIR holds no TorchConfig.cmake (it is LibTorch's share/cmake/Torch)"
  local v; v=$(sed -n 's/^set(PACKAGE_VERSION "\(.*\)")/\1/p' "$Torch_DIR/TorchConfigVersion.cmake" 2>/dev/null)
  local minor; minor=$(echo "$v" | cut -d. -f1,2)
  [[ " $BELLOWS_TORCH_SUPPORTED " == *" $minor "* ]] || die "Torch_DIR=$Torch_DIR is LibTorch ${v:-of unknown version}; bellows builds against torch $BELLOWS_TORCH_SUPPORTED"
  BELLOWS_TORCH_CMAKE=$(cd "$Torch_DIR/.." && pwd)
  export BELLOWS_PYTHON="${BELLOWS_PYTHON:-$(command -v python3)}"
}

if [ -n "${BELLOWS_DEPS_PREFIX:-}" ]; then use_deps_prefix; else install_apt_packages; fi
if [ -n "${BELLOWS_TORCH:-}" ]; then
  use_existing_python
elif [ -n "${Torch_DIR:-}" ]; then
  use_torch_dir
else
  install_pinned_torch
fi
mkdir -p "$CCACHE_DIR"
[ -f "$BELLOWS_TORCH_CMAKE/Torch/TorchConfig.cmake" ] || die "no TorchConfig.cmake under $BELLOWS_TORCH_CMAKE"
export BELLOWS_TORCH_CMAKE
# What CMake's CMAKE_PREFIX_PATH gets (scripts/dev.sh): LibTorch first, then the prefix of libraries, if any.
export BELLOWS_PREFIX_PATH="$BELLOWS_TORCH_CMAKE${BELLOWS_EXTRA_PREFIX_PATH:+;$BELLOWS_EXTRA_PREFIX_PATH}"

if [ "${BASH_SOURCE[0]}" = "$0" ]; then
  printf 'BELLOWS_CACHE=%s\nBELLOWS_PYTHON=%s\nBELLOWS_TORCH_CMAKE=%s\nBELLOWS_PREFIX_PATH=%s\nCCACHE_DIR=%s\nCUDAToolkit_ROOT=%s\n' \
    "$BELLOWS_CACHE" "$BELLOWS_PYTHON" "$BELLOWS_TORCH_CMAKE" "$BELLOWS_PREFIX_PATH" "$CCACHE_DIR" "$CUDAToolkit_ROOT"
fi
