#!/usr/bin/env bash
# A bellows that runs on a GPU node without compiling there (docs/gpu.md): built here against the PyTorch the node
# has (default torch 2.11.0+cu130 from PyPI, the device machines' version), packed with the C++ libraries it needs.
#   scripts/gpu_bundle.sh OUT_DIR
# Makes OUT_DIR/bellows-bundle/ (bin/bellows, bin/bellows_example_data, bin/bellows_online_job, lib/: libbellows, libbellows_c, its SentencePiece module
# and every library `ldd` resolves outside glibc, libstdc++/libgcc and LibTorch's own (torch/lib, nvidia/*); share/:
# the hardware profiles) and OUT_DIR/bellows-bundle.tar.xz (what travels; at most 48 MiB). RPATHs are relative to
# the bundle ($ORIGIN); LibTorch and the CUDA libraries are found at run time from the node's `python3 -c 'import
# torch'` (scripts/gpu_check.sh puts them on LD_LIBRARY_PATH; bundle/env.sh does the same for a shell).
# BELLOWS_BUNDLE_TORCH=/path/to/python: build against that Python's torch instead (its version must be the node's).
set -euo pipefail
cd "$(dirname "$0")/.."
out="${1:?usage: scripts/gpu_bundle.sh OUT_DIR}"
command -v patchelf >/dev/null || { echo "gpu_bundle: needs patchelf (apt-get install patchelf)" >&2; exit 2; }
cache="${BELLOWS_CACHE:-$HOME/.cache/bellows}"
torch_version="${BELLOWS_BUNDLE_TORCH_VERSION:-2.11.0}"
python="${BELLOWS_BUNDLE_TORCH:-}"
if [ -z "$python" ]; then
  venv="$cache/torch-$torch_version-bundle"
  if [ ! -x "$venv/bin/python" ] || ! "$venv/bin/python" -c "import torch, sys; sys.exit(torch.__version__.split('+')[0] != '$torch_version')" 2>/dev/null; then
    python3 -m venv "$venv"
    "$venv/bin/pip" install -q "torch==$torch_version" numpy
  fi
  python="$venv/bin/python"
fi
"$python" -c "import torch; print('gpu_bundle: building against torch', torch.__version__, 'CUDA', torch.version.cuda)" >&2
build="${BELLOWS_BUILD_DIR:-build-bundle}"
BELLOWS_TORCH="$python" BELLOWS_BUILD_DIR="$build" BELLOWS_BUILD_TYPE=Release scripts/dev.sh build bellows_cli bellows_example_data bellows_online_job

torch_dir=$("$python" -c 'import os, torch; print(os.path.dirname(os.path.dirname(torch.__file__)))')
dest="$out/bellows-bundle"
rm -rf "$dest"
mkdir -p "$dest/bin" "$dest/lib" "$dest/share/bellows"
cp "$build/bin/bellows" "$build/bin/bellows_example_data" "$build/bin/bellows_online_job" "$dest/bin/"
cp -L "$build"/src/libbellows.so.0 "$build"/src/libbellows_sentencepiece.so "$build"/src/capi/libbellows_c.so.0 "$dest/lib/"
ln -s libbellows.so.0 "$dest/lib/libbellows.so"
cp -r "$build/share/bellows/profiles" "$dest/share/bellows/"
# What ldd resolves outside the base system every Linux with a C++ compiler has, and outside the node's PyTorch.
keep_out='^(linux-vdso|ld-linux|libc\.|libm\.|libdl\.|librt\.|libpthread\.|libresolv\.|libutil\.|libstdc\+\+|libgcc_s)'
for f in "$dest"/bin/* "$dest"/lib/libbellows.so.0 "$dest"/lib/libbellows_sentencepiece.so "$dest"/lib/libbellows_c.so.0; do
  ldd "$f" | awk '/=> \// {print $1, $3}' | while read -r name path; do
    [[ "$name" =~ $keep_out ]] && continue
    case "$path" in "$torch_dir"/*|/usr/local/cuda*) continue ;; esac
    [ -e "$dest/lib/$name" ] || cp -L "$path" "$dest/lib/$name"
  done
done
for f in "$dest"/bin/*; do patchelf --set-rpath '$ORIGIN/../lib' "$f"; done
for f in "$dest"/lib/*.so*; do [ -L "$f" ] || patchelf --set-rpath '$ORIGIN' "$f"; done
strip --strip-unneeded "$dest"/bin/* "$dest"/lib/*.so* 2>/dev/null || true
cat >"$dest/env.sh" <<'SH'
# source bellows-bundle/env.sh: LibTorch and the CUDA libraries from this machine's python3 (torch) on LD_LIBRARY_PATH
# and the bundle's bin on PATH.
_b="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
export PATH="$_b/bin:$PATH"
export LD_LIBRARY_PATH="$(${BELLOWS_CHECK_PYTHON:-python3} -c 'import glob, os, torch
lib = os.path.join(os.path.dirname(torch.__file__), "lib"); site = os.path.dirname(os.path.dirname(torch.__file__))
print(":".join([lib] + sorted(glob.glob(os.path.join(site, "nvidia", "*", "lib")))))')${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
unset _b
SH
"$python" -c 'import torch; print(torch.__version__)' >"$dest/TORCH_VERSION"
tar -C "$out" -cJf "$out/bellows-bundle.tar.xz" bellows-bundle
size=$(stat -c %s "$out/bellows-bundle.tar.xz")
printf 'gpu_bundle: %s: %d files, %s unpacked, %.1f MiB packed (torch %s)\n' "$out/bellows-bundle.tar.xz" \
  "$(find "$dest" -type f | wc -l)" "$(du -sh "$dest" | cut -f1)" "$(echo "$size / 1048576" | bc -l)" "$(cat "$dest/TORCH_VERSION")" >&2
[ "$size" -le $((48 * 1024 * 1024)) ] || { echo "gpu_bundle: the bundle is over 48 MiB" >&2; exit 1; }
