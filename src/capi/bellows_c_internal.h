/* Internal to bellows' C libraries: what the layers over libbellows_c (the MPI layer mpi/bellows_c_mpi.c, the Fortran
 * modules) need from it beyond the C API. Not installed and not part of the API: its names may change with any
 * release. libbellows_c exports them (their names match bellows_c.map's bellows_*); no public header declares them. */
#ifndef BELLOWS_C_INTERNAL_H
#define BELLOWS_C_INTERNAL_H

#include "bellows/bellows_c.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Sets the calling thread's last error (what bellows_last_error returns until that thread's next call) to
 * `message` and returns `status`: how a layer over libbellows_c reports a failure of its own, as the C API's calls
 * report theirs. `message` is copied; NULL reads as "". Implemented in bellows_c.cpp. */
BELLOWS_C_EXPORT int bellows_internal_fail(int status, const char* message);

#ifdef __cplusplus
}
#endif

#endif /* BELLOWS_C_INTERNAL_H */
