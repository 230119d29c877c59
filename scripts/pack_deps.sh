#!/usr/bin/env bash
# The C++ libraries bellows builds against, as Debian packages to carry to a machine with no package registry
# (an air-gapped GPU node that has Python with PyTorch, CMake, ninja, a compiler and nvcc; docs/gpu.md):
#   scripts/pack_deps.sh download DIR    on a Debian machine with apt: the .deb files of the -dev packages
#                                        scripts/setup.sh installs and of the libraries they need, as installed
#                                        here, into DIR (about 30 MB); base-system packages are left out
#   scripts/pack_deps.sh unpack DIR PREFIX   on the target: dpkg -x each .deb into PREFIX; then build with
#                                        BELLOWS_DEPS_PREFIX=PREFIX BELLOWS_TORCH=$(command -v python3) scripts/dev.sh ...
set -euo pipefail

# What bellows compiles and links against (tests included); the test-only Python packages are not here.
BUILD_PACKAGES=(libyaml-cpp-dev libcli11-dev libgloo-dev nlohmann-json3-dev libgtest-dev libgmock-dev libbenchmark-dev
  libnetcdf-dev libpng-dev libjpeg62-turbo-dev zlib1g-dev libssl-dev libsentencepiece-dev libcairo2-dev)
# Present on any Debian or Ubuntu system that has a C++ compiler and Python (or not needed to build): left out.
BASE_SYSTEM='^(libc6|libc6-dev|libc-dev-bin|linux-libc-dev|libstdc\+\+.*|libgcc.*|gcc.*|g\+\+.*|cpp.*|libgfortran.*|gfortran.*|binutils.*|libbinutils|libctf.*|libgprofng.*|libsframe.*|lib(a|l|t|ub|hwa)san.*|libitm.*|libquadmath.*|libatomic.*|libgomp.*|libcc1.*|libisl.*|libmpc.*|libmpfr.*|libgmp.*|perl.*|libperl.*|python3.*|libpython3.*|fonts-.*|ttf-.*|xfonts-.*|libicu.*|icu-devtools|tzdata|debconf.*|cdebconf|dpkg|tar|passwd|install-info|sensible-utils|ucf|mailcap|media-types|netbase|readline-common|libreadline.*|libncurses.*|libtinfo.*|zlib1g|libzstd1|liblzma5|libbz2-1.0|libselinux1|libsepol2|libsemanage.*|libaudit.*|libcap-ng0|libpam.*|libcrypt1|libcrypt-dev|libnsl.*|libtirpc.*|rpcsvc-proto|libdb5.*|libgdbm.*|libffi8|libexpat1|libuuid1|libblkid1|libmount1|libsystemd0|libudev1|libdebian-installer4|libnewt.*|libslang2|libtextwrap1|lsb-base|libmd0|libbsd0|libkeyutils1|libkrb5.*|libk5crypto3|libgssapi.*|libcom-err2|libssl3|libsasl2.*|libldap.*|libunistring2|libidn2.*|libp11-kit0|libtasn1.*|libnettle8|libhogweed6|libgnutls.*|libnss3|libnspr4|libsqlite3-0|x11-common|libelf1|libglib2.0-bin|libglib2.0-data|libglib2.0-dev-bin|pkgconf.*|pkg-config|libpkgconf3|googletest)$'

die() { printf '[pack_deps] error: %s\n' "$*" >&2; exit 1; }

installed_version() { { dpkg-query -W -f='${Status} ${Version}' "$1" 2>/dev/null || true; } | sed -n 's/^install ok installed //p'; }

download() {
  local dir="$1"
  command -v apt-get >/dev/null || die "download needs a Debian machine with apt-get"
  local missing=()
  for p in "${BUILD_PACKAGES[@]}"; do
    if [ -z "$(installed_version "$p")" ]; then missing+=("$p"); fi
  done
  [ ${#missing[@]} -eq 0 ] || die "not installed here: ${missing[*]} (scripts/setup.sh installs them)"
  # The installed packages among the dependencies (recursively) of the build packages (not the alternatives apt
  # lists), in the versions apt offers now (an installed version may no longer be downloadable).
  local wanted=()
  while read -r p; do
    p="${p%%:*}"
    [[ "$p" =~ $BASE_SYSTEM ]] && continue
    local v; v=$(installed_version "$p")
    if [ -n "$v" ]; then wanted+=("$p"); fi
  done < <(apt-cache depends --recurse --no-recommends --no-suggests --no-conflicts --no-breaks --no-replaces --no-enhances \
             "${BUILD_PACKAGES[@]}" 2>/dev/null | grep -v '^ ' | sort -u)
  mkdir -p "$dir"
  (cd "$dir" && apt-get download -qq "${wanted[@]}")
  printf '[pack_deps] %d packages, %s in %s\n' "${#wanted[@]}" "$(du -sh "$dir" | cut -f1)" "$dir" >&2
}

unpack() {
  local dir="$1" prefix="$2"
  command -v dpkg >/dev/null || die "unpack needs dpkg (dpkg -x)"
  ls "$dir"/*.deb >/dev/null 2>&1 || die "no .deb files in $dir"
  mkdir -p "$prefix"
  for f in "$dir"/*.deb; do dpkg -x "$f" "$prefix"; done
  # Symbolic links that name an absolute /usr/lib path (libfoo.so -> /usr/lib/...) point into the prefix instead.
  find "$prefix" -type l -lname '/*' | while read -r link; do ln -sfn "$prefix$(readlink "$link")" "$link"; done
  # A development link to a library of the base system (libz.so -> libz.so.1.2.13, left out above) points at this
  # system's copy of that library by its soname (libz.so.1), whatever its full version here.
  find "$prefix" -xtype l -name 'lib*.so' | while read -r link; do
    local target; target=$(basename "$(readlink "$link")")
    local soname; soname="${target%%.so.*}.so.$(echo "${target#*.so.}" | cut -d. -f1)"
    local found=""
    for d in /usr/lib/x86_64-linux-gnu /lib/x86_64-linux-gnu /usr/lib64 /lib64; do
      if [ -e "$d/$soname" ]; then found="$d/$soname"; break; fi
    done
    if [ -n "$found" ]; then ln -sfn "$found" "$link"; else printf '[pack_deps] warning: %s -> %s: not in the prefix, no %s on this system\n' "$link" "$target" "$soname" >&2; fi
  done
  # CMake package files that name libraries by absolute path (netCDF's names HDF5's /usr/lib/.../libhdf5.so): those
  # the prefix holds are named there.
  { grep -rlE '/usr/(lib|include)/' "$prefix" --include='*.cmake' || true; } | while read -r file; do
    grep -oE '/usr/(lib|include)/[^;" )]+' "$file" | sort -u | while read -r path; do
      if [ -e "$prefix$path" ]; then sed -i "s|\([;\" ]\)$path|\1$prefix$path|g" "$file"; fi
    done
  done
  printf '[pack_deps] unpacked %d packages into %s (%s)\n' "$(ls "$dir"/*.deb | wc -l)" "$prefix" "$(du -sh "$prefix" | cut -f1)" >&2
}

case "${1:-}" in
  download) [ $# -eq 2 ] || die "usage: scripts/pack_deps.sh download DIR"; download "$2" ;;
  unpack) [ $# -eq 3 ] || die "usage: scripts/pack_deps.sh unpack DIR PREFIX"; unpack "$2" "$3" ;;
  *) die "usage: scripts/pack_deps.sh download DIR | unpack DIR PREFIX" ;;
esac
