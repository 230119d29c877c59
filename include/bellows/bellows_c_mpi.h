/* bellows over MPI: a trainer whose training ranks are an MPI communicator's processes (a simulation's ranks, or a
 * sub-communicator of them: one training rank per GPU or per node). Link with -lbellows_c_mpi (pkg-config
 * bellows-mpi; CMake bellows::bellows_c_mpi), built when CMake found MPI; libbellows_c itself has no MPI in it.
 *
 * The communicator only sets up the job: its rank 0 picks a free TCP port, MPI_Bcast tells every rank where to
 * meet, and then the ranks train over PyTorch's c10d (Gloo on the CPU, NCCL on GPUs) exactly as processes started
 * by `bellows launch` do. No MPI call is made after bellows_create_mpi returns, so the simulation's own MPI traffic
 * is never interleaved with bellows'. Every rank of `comm` must call it (a collective over comm); processes outside
 * comm must not. MPI must be initialised (MPI_Init or MPI_Init_thread); any thread level will do.
 *
 * Where rank 0 listens: its host name, or 127.0.0.1 when every rank of comm runs on its node; the environment's
 * BELLOWS_RENDEZVOUS_ADDR overrides the host (a node's fast interface). */
#ifndef BELLOWS_C_MPI_H
#define BELLOWS_C_MPI_H

#include <mpi.h>

#include "bellows/bellows_c.h"

#ifdef __cplusplus
extern "C" {
#endif

BELLOWS_C_EXPORT int bellows_create_mpi(const char* config_path, const char* const* overrides, int32_t n_overrides, MPI_Comm comm,
                                        bellows_trainer** out);
BELLOWS_C_EXPORT int bellows_create_mpi_from_string(const char* yaml, const char* const* overrides, int32_t n_overrides, MPI_Comm comm,
                                                    bellows_trainer** out);
/* The same with Fortran's integer handle (`use mpi`: integer comm; `use mpi_f08`: comm%MPI_VAL): what the Fortran
 * module bellows_mpi calls. */
BELLOWS_C_EXPORT int bellows_create_mpi_f(const char* config_path, const char* const* overrides, int32_t n_overrides, MPI_Fint comm,
                                          bellows_trainer** out);
BELLOWS_C_EXPORT int bellows_create_mpi_from_string_f(const char* yaml, const char* const* overrides, int32_t n_overrides,
                                                      MPI_Fint comm, bellows_trainer** out);

#ifdef __cplusplus
}
#endif

#endif /* BELLOWS_C_MPI_H */
