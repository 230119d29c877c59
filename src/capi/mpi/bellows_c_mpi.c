/* bellows over MPI (include/bellows/bellows_c_mpi.h): an MPI communicator becomes a bellows_job. Rank 0 picks a free
 * TCP port and names its host, one MPI_Bcast tells every rank, and bellows_create_job does the rest over c10d; no MPI
 * call is made once the job is described. C11, in a library of its own (libbellows_c_mpi): libbellows_c has no MPI. */
#define _POSIX_C_SOURCE 200809L /* gethostname, strerror_r (the XSI one) */

#include "bellows/bellows_c_mpi.h"

#include <arpa/inet.h>  /* defines: htonl, ntohs */
#include <errno.h>
#include <netinet/in.h> /* defines: struct sockaddr_in, INADDR_ANY */
#include <stdio.h>
#include <stdlib.h>     /* defines: getenv */
#include <string.h>
#include <sys/socket.h> /* defines: socket, bind, getsockname */
#include <unistd.h>     /* defines: gethostname, close */

#include "bellows_c_internal.h" /* defines: bellows_internal_fail */

enum { kHostCapacity = 256, kMessageCapacity = 512 };

/* What rank 0 tells every rank in one broadcast: a failure (status and message, then the same on every rank) or
 * where to meet. */
typedef struct meeting {
  int32_t status;
  int32_t port;
  int32_t host_given; /* 1: BELLOWS_RENDEZVOUS_ADDR named the host; used as it is */
  char host[kHostCapacity];
  char message[kMessageCapacity];
} meeting;

/* "call: what (hint)" as the calling thread's last error; returns status. */
static int fail(int status, const char* call, const char* what, const char* hint) {
  char message[kMessageCapacity + 64];
  snprintf(message, sizeof message, "%s: %s (%s)", call, what, hint);
  return bellows_internal_fail(status, message);
}

/* A failed MPI call (while bellows works, comm's error handler is MPI_ERRORS_RETURN). */
static int mpi_failed(const char* call, const char* mpi_call, int code) {
  char text[MPI_MAX_ERROR_STRING];
  int length = 0;
  if (MPI_Error_string(code, text, &length) != MPI_SUCCESS) snprintf(text, sizeof text, "MPI error %d", code);
  char what[MPI_MAX_ERROR_STRING + 64];
  snprintf(what, sizeof what, "%s failed: %s", mpi_call, text);
  return fail(BELLOWS_ERR_INTERNAL, call, what, "every rank of the communicator must call it, with the same communicator");
}

static int mpi_ready(const char* call) {
  int initialized = 0, finalized = 0;
  MPI_Initialized(&initialized);
  MPI_Finalized(&finalized);
  if (finalized) return fail(BELLOWS_ERR_USAGE, call, "MPI is finalised", "create the trainer before MPI_Finalize");
  if (!initialized) return fail(BELLOWS_ERR_USAGE, call, "MPI is not initialised", "call MPI_Init or MPI_Init_thread first");
  return BELLOWS_OK;
}

/* A TCP port that is free now: a socket bound to port 0 on every interface, read back, closed. c10d binds it again
 * moments later; another process could take it in between, as with any port picked this way. */
static int free_port(int32_t* port, char* error, size_t capacity) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) {
    char reason[128] = "";
    strerror_r(errno, reason, sizeof reason);
    snprintf(error, capacity, "socket: %s", reason);
    return 0;
  }
  struct sockaddr_in address;
  memset(&address, 0, sizeof address);
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_ANY);
  address.sin_port = 0;
  socklen_t length = sizeof address;
  const int ok = bind(fd, (struct sockaddr*)&address, sizeof address) == 0 &&
                 getsockname(fd, (struct sockaddr*)&address, &length) == 0;
  if (!ok) {
    char reason[128] = "";
    strerror_r(errno, reason, sizeof reason);
    snprintf(error, capacity, "bind to port 0: %s", reason);
  }
  close(fd);
  *port = ntohs(address.sin_port);
  return ok;
}

/* Rank 0: its host (or BELLOWS_RENDEZVOUS_ADDR) and a free port. */
static void plan_meeting(const char* call, meeting* m) {
  m->status = BELLOWS_OK;
  const char* given = getenv("BELLOWS_RENDEZVOUS_ADDR");
  char what[kMessageCapacity / 2];
  if (given != NULL && given[0] != '\0') {
    if (strlen(given) >= sizeof m->host) {
      snprintf(what, sizeof what, "BELLOWS_RENDEZVOUS_ADDR on rank 0 is %zu characters long, more than %d", strlen(given),
               kHostCapacity - 1);
      m->status = BELLOWS_ERR_USAGE;
      snprintf(m->message, sizeof m->message, "%s: %s (set it to a host name or address of rank 0's node)", call, what);
      return;
    }
    strcpy(m->host, given);
    m->host_given = 1;
  } else if (gethostname(m->host, sizeof m->host) != 0) {
    char reason[128] = "";
    strerror_r(errno, reason, sizeof reason);
    m->status = BELLOWS_ERR_RESOURCE;
    snprintf(m->message, sizeof m->message, "%s: rank 0 has no host name: gethostname: %s (set BELLOWS_RENDEZVOUS_ADDR to "
             "rank 0's address)", call, reason);
    return;
  }
  m->host[sizeof m->host - 1] = '\0';
  char error[kMessageCapacity / 2] = "";
  if (!free_port(&m->port, error, sizeof error)) {
    m->status = BELLOWS_ERR_RESOURCE;
    snprintf(m->message, sizeof m->message, "%s: rank 0 of the communicator found no free TCP port for the rendezvous: %s "
             "(rank 0's node must allow a process to listen on a TCP port)", call, error);
  }
}

/* The job of this rank of comm: rank and size, node-local rank and size, and where rank 0 listens. Collective. */
static int describe_job(const char* call, MPI_Comm comm, bellows_job* job, char* rendezvous, size_t capacity) {
  int rank = 0, size = 0, local_rank = 0, local_size = 0, code;
  if ((code = MPI_Comm_rank(comm, &rank)) != MPI_SUCCESS) return mpi_failed(call, "MPI_Comm_rank", code);
  if ((code = MPI_Comm_size(comm, &size)) != MPI_SUCCESS) return mpi_failed(call, "MPI_Comm_size", code);
  MPI_Comm node = MPI_COMM_NULL;
  if ((code = MPI_Comm_split_type(comm, MPI_COMM_TYPE_SHARED, rank, MPI_INFO_NULL, &node)) != MPI_SUCCESS) {
    return mpi_failed(call, "MPI_Comm_split_type", code);
  }
  MPI_Comm_rank(node, &local_rank);
  MPI_Comm_size(node, &local_size);
  MPI_Comm_free(&node);

  meeting m;
  memset(&m, 0, sizeof m);
  if (rank == 0) plan_meeting(call, &m);
  if ((code = MPI_Bcast(&m, (int)sizeof m, MPI_BYTE, 0, comm)) != MPI_SUCCESS) return mpi_failed(call, "MPI_Bcast", code);
  m.host[sizeof m.host - 1] = '\0';
  m.message[sizeof m.message - 1] = '\0';
  if (m.status != BELLOWS_OK) return bellows_internal_fail(m.status, m.message);

  /* Every rank on rank 0's node (one shared-memory node, one host name): loopback, no name lookup. */
  char own[kHostCapacity] = "";
  int here = local_size == size && gethostname(own, sizeof own) == 0;
  own[sizeof own - 1] = '\0';
  here = here && strcmp(own, m.host) == 0;
  int all_here = 0;
  if ((code = MPI_Allreduce(&here, &all_here, 1, MPI_INT, MPI_LAND, comm)) != MPI_SUCCESS) {
    return mpi_failed(call, "MPI_Allreduce", code);
  }
  snprintf(rendezvous, capacity, "%s:%d", !m.host_given && all_here ? "127.0.0.1" : m.host, (int)m.port);
  job->rank = rank;
  job->size = size;
  job->local_rank = local_rank;
  job->local_size = local_size;
  job->rendezvous = rendezvous;
  return BELLOWS_OK;
}

/* Every create over MPI: the job from comm (with comm's MPI errors returned, not fatal, meanwhile), then
 * bellows_create_job or bellows_create_job_from_string. */
static int create_over(const char* call, const char* text, int from_file, const char* const* overrides, int32_t n_overrides,
                       MPI_Comm comm, bellows_trainer** out) {
  if (out != NULL) *out = NULL;
  int status = mpi_ready(call);
  if (status != BELLOWS_OK) return status;
  if (out == NULL) return fail(BELLOWS_ERR_USAGE, call, "out is NULL", "pass the address of a bellows_trainer*");
  if (text == NULL) {
    return fail(BELLOWS_ERR_USAGE, call, from_file ? "config_path is NULL" : "yaml is NULL", "pass the config");
  }
  if (comm == MPI_COMM_NULL) {
    return fail(BELLOWS_ERR_USAGE, call, "comm is MPI_COMM_NULL",
                "pass a communicator this process belongs to, such as MPI_COMM_WORLD; processes outside it do not call");
  }
  int inter = 0;
  if (MPI_Comm_test_inter(comm, &inter) == MPI_SUCCESS && inter) {
    return fail(BELLOWS_ERR_USAGE, call, "comm is an intercommunicator", "pass an intracommunicator (MPI_Intercomm_merge)");
  }

  MPI_Errhandler saved = MPI_ERRHANDLER_NULL;
  const int have_saved = MPI_Comm_get_errhandler(comm, &saved) == MPI_SUCCESS;
  if (have_saved) MPI_Comm_set_errhandler(comm, MPI_ERRORS_RETURN);
  bellows_job job;
  memset(&job, 0, sizeof job);
  char rendezvous[kHostCapacity + 16] = "";
  status = describe_job(call, comm, &job, rendezvous, sizeof rendezvous);
  if (have_saved) {
    MPI_Comm_set_errhandler(comm, saved);
    MPI_Errhandler_free(&saved);
  }
  if (status != BELLOWS_OK) return status;
  return from_file ? bellows_create_job(text, overrides, n_overrides, &job, out)
                   : bellows_create_job_from_string(text, overrides, n_overrides, &job, out);
}

int bellows_create_mpi(const char* config_path, const char* const* overrides, int32_t n_overrides, MPI_Comm comm,
                       bellows_trainer** out) {
  return create_over("bellows_create_mpi", config_path, 1, overrides, n_overrides, comm, out);
}

int bellows_create_mpi_from_string(const char* yaml, const char* const* overrides, int32_t n_overrides, MPI_Comm comm,
                                   bellows_trainer** out) {
  return create_over("bellows_create_mpi_from_string", yaml, 0, overrides, n_overrides, comm, out);
}

/* Fortran's handles (the module bellows_mpi): named as the Fortran procedures are, bellows_create_mpi*. MPI_Comm_f2c
 * only once MPI is up; an unknown handle becomes MPI_COMM_NULL. */
int bellows_create_mpi_f(const char* config_path, const char* const* overrides, int32_t n_overrides, MPI_Fint comm,
                         bellows_trainer** out) {
  if (out != NULL) *out = NULL;
  const int status = mpi_ready("bellows_create_mpi");
  if (status != BELLOWS_OK) return status;
  return create_over("bellows_create_mpi", config_path, 1, overrides, n_overrides, MPI_Comm_f2c(comm), out);
}

int bellows_create_mpi_from_string_f(const char* yaml, const char* const* overrides, int32_t n_overrides, MPI_Fint comm,
                                     bellows_trainer** out) {
  if (out != NULL) *out = NULL;
  const int status = mpi_ready("bellows_create_mpi_from_string");
  if (status != BELLOWS_OK) return status;
  return create_over("bellows_create_mpi_from_string", yaml, 0, overrides, n_overrides, MPI_Comm_f2c(comm), out);
}
