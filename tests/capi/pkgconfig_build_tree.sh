#!/usr/bin/env bash
# The build tree's pkg-config files link and run programs against the build, as docs/c_api.md's commands do
# against an installation: a C program (bellows.pc) and, where the Fortran module was built, a Fortran one
# (bellows-fortran.pc); where the MPI layer was built, a C and a Fortran MPI program (bellows-mpi.pc,
# bellows-fortran-mpi.pc), run as singletons (no mpirun): MPI_COMM_NULL is refused with BELLOWS_ERR_USAGE.
# Usage: pkgconfig_build_tree.sh BUILD_DIR WORK_DIR VERSION
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
if [ -f "$build/pkgconfig/bellows-mpi.pc" ] && command -v mpicc >/dev/null; then
  cat >"$work/mpi.c" <<'C'
#include <stdio.h>
#include <bellows/bellows_c_mpi.h>
int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  bellows_trainer* t = NULL;
  const int status = bellows_create_mpi("unused.yaml", NULL, 0, MPI_COMM_NULL, &t);
  printf("%d %d\n", status, t == NULL);
  MPI_Finalize();
  return 0;
}
C
  mpicc "$work/mpi.c" $(pkg-config --cflags --libs bellows-mpi) -o "$work/mpi_c"
  out=$("$work/mpi_c")
  [ "$out" = "2 1" ] || { echo "C MPI program printed '$out', expected '2 1' (BELLOWS_ERR_USAGE, no trainer)" >&2; exit 1; }
  echo "C MPI: $out"
fi
if [ -f "$build/pkgconfig/bellows-fortran-mpi.pc" ] && command -v mpifort >/dev/null; then
  cat >"$work/mpi.f90" <<'F'
program create_mpi_null
  use mpi_f08
  use bellows
  use bellows_mpi
  implicit none
  type(bellows_trainer) :: t
  integer :: status
  call MPI_Init()
  call bellows_create_mpi(t, 'unused.yaml', MPI_COMM_NULL, status)
  call MPI_Finalize()
  print '(i0)', status
end program create_mpi_null
F
  mpifort "$work/mpi.f90" $(pkg-config --cflags --libs bellows-fortran-mpi) -o "$work/mpi_f" -J "$work"
  out=$("$work/mpi_f")
  [ "$out" = "2" ] || { echo "Fortran MPI program printed '$out', expected '2' (BELLOWS_ERR_USAGE)" >&2; exit 1; }
  echo "Fortran MPI: $out"
fi
