#!/usr/bin/env bash
# Installs everything bellows builds against, idempotently: Debian -dev packages (apt), LibTorch from the
# pinned PyPI `torch` wheel in a virtual environment kept in a cache outside the clone, and a ccache dir.
# Source it (`. scripts/setup.sh`) to get BELLOWS_* variables, or run it to install and print them.
set -euo pipefail

BELLOWS_TORCH_VERSION=2.13.0        # pinned: its CUDA (13.0) matches the toolkit's major version
BELLOWS_CUDA_MAJOR=13
BELLOWS_PY_EXTRAS=(numpy==2.4.6 jsonschema==4.26.0 safetensors==0.8.0 tensorboard==2.21.0)   # golden generators, schema checks, event-file round trip
BELLOWS_APT_PACKAGES=(cmake ninja-build g++ gfortran ccache pkg-config python3-venv
  libyaml-cpp-dev libcli11-dev libgloo-dev nlohmann-json3-dev libgtest-dev libgmock-dev libbenchmark-dev
  libnetcdf-dev libpng-dev libjpeg62-turbo-dev zlib1g-dev libssl-dev libsentencepiece-dev libcairo2-dev
  clang-16 libclang-rt-16-dev)   # Clang 16 and its compiler-rt (libFuzzer): scripts/dev.sh fuzz (Clang 14 lacks std::source_location)

export BELLOWS_CACHE="${BELLOWS_CACHE:-$HOME/.cache/bellows}"
export BELLOWS_VENV="$BELLOWS_CACHE/torch-$BELLOWS_TORCH_VERSION"
export BELLOWS_PYTHON="$BELLOWS_VENV/bin/python"
export CCACHE_DIR="${CCACHE_DIR:-$BELLOWS_CACHE/ccache}"
export CUDAToolkit_ROOT="${CUDAToolkit_ROOT:-/usr/local/cuda}"

say() { printf '[setup] %s\n' "$*" >&2; }
die() { printf '[setup] error: %s\n' "$*" >&2; exit 1; }

install_apt_packages() {
  local missing=()
  for p in "${BELLOWS_APT_PACKAGES[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
  done
  [ ${#missing[@]} -eq 0 ] && return 0
  say "installing Debian packages: ${missing[*]}"
  local sudo=""; [ "$(id -u)" -eq 0 ] || sudo="sudo"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
}

check_cuda_toolkit() {
  local nvcc="$CUDAToolkit_ROOT/bin/nvcc"
  [ -x "$nvcc" ] || die "no CUDA toolkit at $CUDAToolkit_ROOT (nvcc missing); LibTorch's CMake config needs it. Set CUDAToolkit_ROOT."
  local v; v=$("$nvcc" --version | sed -n 's/.*release \([0-9]*\)\..*/\1/p')
  [ "$v" = "$BELLOWS_CUDA_MAJOR" ] || die "CUDA toolkit major version is $v, torch $BELLOWS_TORCH_VERSION needs $BELLOWS_CUDA_MAJOR"
}

verify_torch() {
  "$BELLOWS_PYTHON" - "$BELLOWS_TORCH_VERSION" "$BELLOWS_CUDA_MAJOR" <<'PY' 2>/dev/null
import sys, warnings
warnings.filterwarnings("ignore")
import torch
want, cuda_major = sys.argv[1], sys.argv[2]
ok = torch.__version__.split("+")[0] == want
ok = ok and torch.compiled_with_cxx11_abi()
ok = ok and torch.version.cuda is not None and torch.version.cuda.split(".")[0] == cuda_major
sys.exit(0 if ok else 1)
PY
}

# The verification result is remembered in a stamp file naming the pins, so later runs skip the slow import.
stamp_text() { printf '%s\n' "torch==$BELLOWS_TORCH_VERSION" "cuda=$BELLOWS_CUDA_MAJOR" "${BELLOWS_PY_EXTRAS[@]}"; }

install_torch() {
  local stamp="$BELLOWS_VENV/.bellows-verified"
  if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$(stamp_text)" ] && [ -x "$BELLOWS_PYTHON" ]; then return 0; fi
  if [ -x "$BELLOWS_PYTHON" ] && verify_torch; then install_py_extras; stamp_text > "$stamp"; return 0; fi
  say "installing torch==$BELLOWS_TORCH_VERSION into $BELLOWS_VENV (a few GB, once per machine)"
  mkdir -p "$BELLOWS_CACHE"
  python3 -m venv "$BELLOWS_VENV"
  "$BELLOWS_VENV/bin/pip" install -q --progress-bar off --disable-pip-version-check \
    "torch==$BELLOWS_TORCH_VERSION" "${BELLOWS_PY_EXTRAS[@]}"
  verify_torch || die "torch in $BELLOWS_VENV failed verification (version $BELLOWS_TORCH_VERSION, C++11 ABI, CUDA $BELLOWS_CUDA_MAJOR)"
  install_py_extras
  stamp_text > "$stamp"
}

install_py_extras() {
  local missing=()
  for req in "${BELLOWS_PY_EXTRAS[@]}"; do
    "$BELLOWS_VENV/bin/pip" show -q "${req%%==*}" >/dev/null 2>&1 || missing+=("$req")
  done
  [ ${#missing[@]} -eq 0 ] || "$BELLOWS_VENV/bin/pip" install -q --progress-bar off --disable-pip-version-check "${missing[@]}"
}

install_apt_packages
check_cuda_toolkit
install_torch
mkdir -p "$CCACHE_DIR"
BELLOWS_TORCH_CMAKE=$(echo "$BELLOWS_VENV"/lib/python3*/site-packages/torch/share/cmake)
[ -f "$BELLOWS_TORCH_CMAKE/Torch/TorchConfig.cmake" ] || die "no TorchConfig.cmake under $BELLOWS_TORCH_CMAKE"
export BELLOWS_TORCH_CMAKE

if [ "${BASH_SOURCE[0]}" = "$0" ]; then
  printf 'BELLOWS_CACHE=%s\nBELLOWS_VENV=%s\nBELLOWS_TORCH_CMAKE=%s\nCCACHE_DIR=%s\nCUDAToolkit_ROOT=%s\n' \
    "$BELLOWS_CACHE" "$BELLOWS_VENV" "$BELLOWS_TORCH_CMAKE" "$CCACHE_DIR" "$CUDAToolkit_ROOT"
fi
