#!/usr/bin/env bash
# The build tree's pkg-config files link and run programs against the build, as docs/c_api.md's commands do
# against an installation: a C program (bellows.pc) and, where the Fortran module was built, a Fortran one
# (bellows-fortran.pc). Usage: pkgconfig_build_tree.sh BUILD_DIR WORK_DIR VERSION
set -euo pipefail
build="$1" work="$2" version="$3"
rm -rf "$work" && mkdir -p "$work"
export PKG_CONFIG_PATH="$build/pkgconfig"
cat >"$work/version.c" <<'C'
#include <stdio.h>
#include <bellows/bellows_c.h>
int main(void) { printf("%s %d\n", bellows_version(), bellows_api_version() == BELLOWS_C_API_VERSION); return 0; }
C
cc "$work/version.c" $(pkg-config --cflags --libs bellows) -o "$work/version_c"
out=$("$work/version_c")
[ "$out" = "$version 1" ] || { echo "C program printed '$out', expected '$version 1'" >&2; exit 1; }
echo "C: $out"
if [ -f "$build/pkgconfig/bellows-fortran.pc" ] && command -v gfortran >/dev/null; then
  cat >"$work/version.f90" <<'F'
program version
  use bellows
  implicit none
  print '(a)', bellows_version()
end program version
F
  gfortran "$work/version.f90" $(pkg-config --cflags --libs bellows-fortran) -o "$work/version_f" -J "$work"
  out=$("$work/version_f")
  [ "$out" = "$version" ] || { echo "Fortran program printed '$out', expected '$version'" >&2; exit 1; }
  echo "Fortran: $out"
fi
