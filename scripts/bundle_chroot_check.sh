#!/usr/bin/env bash
# Proves a GPU bundle (scripts/gpu_bundle.sh) on a machine that has none of the build's packages: a minimal Debian 12
# made with debootstrap (--variant=minbase, python3 only: no -dev package, no CUDA toolkit), the torch venv the
# bundle was built against copied in at the same path, and in it `bellows hw`, `bellows selftest --device cpu` and a
# short W5 run from the bundle. Run as root on a Debian machine with apt (debootstrap is installed if missing).
#   scripts/bundle_chroot_check.sh CHROOT_DIR BUNDLE_TAR_XZ TORCH_VENV
# CHROOT_DIR is made when missing (about 200 MB, plus the venv); /proc, /sys and /dev are bind-mounted for the run
# and unmounted after it. Exit 0 when every step passed; the log is CHROOT_DIR/proof.log.
set -euo pipefail
[ $# -eq 3 ] || { echo "usage: scripts/bundle_chroot_check.sh CHROOT_DIR BUNDLE_TAR_XZ TORCH_VENV" >&2; exit 2; }
root="$1" bundle="$(realpath "$2")" venv="$(realpath "$3")"
here="$(cd "$(dirname "$0")/.." && pwd)"
[ -f "$bundle" ] || { echo "bundle_chroot_check: no bundle $bundle" >&2; exit 2; }
[ -x "$venv/bin/python" ] || { echo "bundle_chroot_check: no venv $venv" >&2; exit 2; }
command -v debootstrap >/dev/null || apt-get install -y debootstrap >/dev/null
if [ ! -x "$root/usr/bin/python3" ]; then
  debootstrap --variant=minbase --include=python3 bookworm "$root" http://deb.debian.org/debian
fi
# The venv at its own path, its interpreter the chroot's python3.11 (a venv names the Python it was made from).
mkdir -p "$root$(dirname "$venv")"
rm -rf "${root:?}$venv" && cp -a "$venv" "$root$venv"
ln -sf /usr/bin/python3.11 "$root$venv/bin/python"
sed -i 's|^home = .*|home = /usr/bin|; s|^executable = .*|executable = /usr/bin/python3.11|' "$root$venv/pyvenv.cfg"
rm -rf "$root/opt/b" "$root/src/bellows" && mkdir -p "$root/opt/b" "$root/src/bellows"
tar -C "$root/opt/b" -xJf "$bundle"
git -C "$here" archive HEAD examples | tar -x -C "$root/src/bellows"
cat >"$root/proof.sh" <<PROOF
set -euo pipefail
export BELLOWS_CHECK_PYTHON=$venv/bin/python BELLOWS_CACHE=/tmp/cache
source /opt/b/bellows-bundle/env.sh
cd /src/bellows
echo "== \$(dpkg -l | grep -c '^ii') packages, \$(dpkg -l | grep '^ii' | awk '{print \$2}' | grep -c -- '-dev' || true) of them -dev; /usr/local/cuda: \$(ls -d /usr/local/cuda 2>/dev/null || echo absent)"
missing=\$(ldd "\$(command -v bellows)" | grep 'not found' || true)
[ -z "\$missing" ] || { echo "unresolved libraries: \$missing"; exit 1; }
echo "== bellows hw"; bellows hw
echo "== bellows selftest --device cpu"; bellows selftest --device cpu
echo "== W5, 20 steps"; bellows_example_data icon-diffusion /tmp/d/icon --quick
bellows train examples/icon-diffusion/config.yaml data.path=/tmp/d/icon/train.npz train.max_steps=20 train.epochs=1000 \\
  output_dir=/tmp/runs name=w5 train.log_every_n_steps=10 train.eval_every_n_steps=0 checkpoint.every_n_steps=0
echo "== passed"
PROOF
mounted=()
cleanup() { for m in "${mounted[@]}"; do umount "$root/$m" || true; done; }
trap cleanup EXIT
for m in proc sys dev; do
  if ! mountpoint -q "$root/$m"; then mount --bind "/$m" "$root/$m"; mounted+=("$m"); fi
done
chroot "$root" /usr/bin/env -i PATH=/usr/bin:/bin HOME=/root /bin/bash /proof.sh 2>&1 | tee "$root/proof.log"
