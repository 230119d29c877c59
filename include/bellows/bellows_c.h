/* bellows C API: train a model inside a running C or Fortran program (seed 002: a simulation pushes the samples
 * it produces into a stream buffer and trains on them every so often, on a background thread while it keeps
 * stepping). Link with -lbellows_c (pkg-config bellows; CMake bellows::bellows_c). Fortran: the module
 * `bellows` (bellows.f90) over these calls. docs/c_api.md is the guide.
 *
 * Conventions
 * - Every call returns a status (BELLOWS_OK = 0, else one of the codes below); bellows_last_error() is the
 *   message of the calling thread's last failed call. No C++ exception leaves a call and no call aborts or
 *   exits the program; an out-of-memory inside a call is BELLOWS_ERR_RESOURCE.
 * - A trainer handle is opaque. A destroyed (or never created) handle is refused with BELLOWS_ERR_USAGE, not
 *   dereferenced, as long as its address has not been handed out again by a later bellows_create.
 * - Tensors are described by bellows_tensor: data, dtype, rank and shape, in C (row-major) order: the last
 *   index varies fastest. A Fortran array a(d1, d2) has the memory of a C array of shape [d2, d1].
 *   Pushed values are copied before the call returns; the caller keeps its buffer.
 * - Thread safety: bellows_push*, bellows_buffered, bellows_metrics, bellows_poll and bellows_last_error may be
 *   called from any thread at any time, also while a session trains. The other calls on one handle must come
 *   from one thread at a time; while a background session runs, bellows_train*, bellows_predict, bellows_save
 *   and bellows_restore return BELLOWS_ERR_BUSY. Different handles are independent, but they share the
 *   process's LibTorch thread pool (the last created trainer's plan sets its size).
 */
#ifndef BELLOWS_C_H
#define BELLOWS_C_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(BELLOWS_C_BUILDING) && defined(__GNUC__)
#define BELLOWS_C_EXPORT __attribute__((visibility("default")))
#else
#define BELLOWS_C_EXPORT
#endif

/* The version of this header's API (major * 10000 + minor * 100 + patch); bellows_api_version() is the
 * library's: a program can check that the two match. */
#define BELLOWS_C_API_VERSION 200

/* Status codes. */
#define BELLOWS_OK 0
#define BELLOWS_ERR_INTERNAL 1  /* a bug or an unexpected failure inside bellows or LibTorch */
#define BELLOWS_ERR_USAGE 2     /* a wrong call: null or dead handle, bad argument, call order (predict before training) */
#define BELLOWS_ERR_CONFIG 3    /* the config: unreadable YAML, unknown key, bad value */
#define BELLOWS_ERR_DATA 4      /* shapes, dtypes, a corrupt or mismatched checkpoint */
#define BELLOWS_ERR_RESOURCE 5  /* out of memory, disk full, device unavailable */
#define BELLOWS_ERR_BUSY 6      /* a background session is running: bellows_wait or bellows_poll first */
#define BELLOWS_NOT_READY 7     /* fewer samples buffered than the session needs: nothing trained */
#define BELLOWS_RUNNING 8       /* bellows_poll: the background session is still running */
#define BELLOWS_STARTED_FRESH 9 /* bellows_create*: resume was asked for, no checkpoint of the run was found: the
                                 * trainer exists (*out is set) and starts untrained; not an error */

/* Element types of bellows_tensor. Floating-point values are trained in float32. */
#define BELLOWS_FLOAT32 0
#define BELLOWS_FLOAT64 1
#define BELLOWS_INT32 2
#define BELLOWS_INT64 3

#define BELLOWS_MAX_DIMS 8

typedef struct bellows_trainer bellows_trainer;

typedef struct bellows_tensor {
  const char* name;                   /* pushes: the sample's tensor name ("x" inputs, "y" targets); else unused */
  void* data;                         /* contiguous values in C order */
  int32_t dtype;                      /* BELLOWS_FLOAT32, ... */
  int32_t ndim;                       /* 0..BELLOWS_MAX_DIMS */
  int64_t shape[BELLOWS_MAX_DIMS];    /* the first ndim entries */
} bellows_tensor;

typedef struct bellows_predict_options {
  int64_t samples;  /* ddpm: draws per input row (1: output [rows, out]; N > 1: [rows, N, out]) */
  uint64_t seed;    /* ddpm: the draws' seed; row r draws from (seed, first_index + r) */
  int64_t first_index;
  int64_t steps;    /* ddpm: 0 = ancestral sampling over all T steps; 1..T = DDIM over that many */
  double eta;       /* ddpm with steps: DDIM noise, 0 (deterministic) .. 1 */
  int32_t ema;      /* -1: the EMA weights when the run has them; 1: EMA weights (an error without); 0: trained weights */
} bellows_predict_options;

typedef struct bellows_metrics {
  int64_t step;                /* optimizer steps taken over all sessions */
  int64_t sessions;            /* training sessions finished */
  double loss;                 /* training loss of the last logging window (NaN before any) */
  double learning_rate;
  double samples_per_second;   /* of the last logging window */
  int64_t buffered;            /* samples in the buffer now */
  int64_t pushed;              /* samples pushed in total */
  int64_t dropped;             /* samples a full buffer dropped (data.stream.when_full: drop_oldest) */
  int64_t taken;               /* samples taken by sessions; with data.stream.clear: pushed = taken + dropped + buffered */
  int32_t training;            /* 1 while a session runs */
  int32_t ranks;               /* training ranks of the trainer's job (1: this process trains alone) */
  double eval_loss;            /* the last evaluation's loss (NaN before any; data.val_fraction > 0 evaluates) */
  double eval_metric;          /* the last evaluation's metric (accuracy, ...; NaN where the model has none) */
  int64_t rejected;            /* samples pushes refused for NaN or Inf values (data.stream.check_finite) */
  int32_t rank;                /* this trainer's rank among the training ranks (0 alone) */
  int32_t restored;            /* 1: the trainer continues from a checkpoint (create's resume or bellows_restore) */
} bellows_metrics;

/* A job of several training processes, for bellows_create_job: this process's place in it and where the ranks
 * meet. MPI programs use bellows_create_mpi (bellows_c_mpi.h), which fills this from a communicator. */
typedef struct bellows_job {
  int32_t rank;              /* 0 .. size - 1 */
  int32_t size;              /* training ranks; every one calls bellows_create_job with the same config */
  int32_t local_rank;        /* among the training ranks on this node (GPU choice, threads) */
  int32_t local_size;
  const char* rendezvous;    /* "HOST:PORT": rank 0 serves the rendezvous on PORT, the others connect to HOST */
} bellows_job;

/* The library's version string ("0.1.0") and API version (compare with BELLOWS_C_API_VERSION). Any thread. */
BELLOWS_C_EXPORT const char* bellows_version(void);
BELLOWS_C_EXPORT int bellows_api_version(void);

/* The message of the calling thread's last failed call ("" if none); valid until that thread's next call. */
BELLOWS_C_EXPORT const char* bellows_last_error(void);

/* A trainer from a YAML config file, or from YAML text, with `n_overrides` "key=value" overrides applied (the
 * command line's syntax: data.batch_size=16). The config reads data.source: stream. Writes the run directory
 * <output_dir>/<name>/ and, with resume set, restores the checkpoint. *out is NULL on failure. */
BELLOWS_C_EXPORT int bellows_create(const char* config_path, const char* const* overrides, int32_t n_overrides, bellows_trainer** out);
BELLOWS_C_EXPORT int bellows_create_from_string(const char* yaml, const char* const* overrides, int32_t n_overrides, bellows_trainer** out);
/* The same, as rank job->rank of job->size training processes: they meet at job->rendezvous (within
 * dist.timeout_s) and train one model data-parallel under dist.strategy (auto: ddp; zero1, zero2). Collective
 * calls: create, bellows_train, bellows_train_async + bellows_wait, bellows_save, bellows_restore and
 * bellows_destroy are called by every rank, in the same order; pushes, predictions and the rest are local. */
BELLOWS_C_EXPORT int bellows_create_job(const char* config_path, const char* const* overrides, int32_t n_overrides, const bellows_job* job,
                                        bellows_trainer** out);
BELLOWS_C_EXPORT int bellows_create_job_from_string(const char* yaml, const char* const* overrides, int32_t n_overrides,
                                                    const bellows_job* job, bellows_trainer** out);
/* Stops a running session at its next step, waits for it and frees the trainer. NULL is a no-op. */
BELLOWS_C_EXPORT int bellows_destroy(bellows_trainer* trainer);

/* One sample: `count` tensors without a sample dimension (e.g. x [7] and y [256]). Any thread. */
BELLOWS_C_EXPORT int bellows_push(bellows_trainer* trainer, const bellows_tensor* tensors, int32_t count);
/* A block of samples: tensors with a leading sample dimension of equal length (x [n, 7], y [n, 256]). */
BELLOWS_C_EXPORT int bellows_push_block(bellows_trainer* trainer, const bellows_tensor* tensors, int32_t count);
/* Samples in the buffer now. Any thread. */
BELLOWS_C_EXPORT int bellows_buffered(bellows_trainer* trainer, int64_t* samples);

/* A training session over the buffered samples when at least `min_samples` are there (0:
 * data.stream.ready_samples), else BELLOWS_NOT_READY. bellows_train returns when it is done;
 * bellows_train_async returns at once and trains on a background thread while the program pushes on. */
BELLOWS_C_EXPORT int bellows_train(bellows_trainer* trainer, int64_t min_samples);
BELLOWS_C_EXPORT int bellows_train_async(bellows_trainer* trainer, int64_t min_samples);
/* BELLOWS_RUNNING while the background session runs, BELLOWS_OK when none does (collect it with bellows_wait).
 * Any thread. */
BELLOWS_C_EXPORT int bellows_poll(bellows_trainer* trainer);
/* Waits for the background session; its status (and message) is this call's. With none running (none started, or
 * its result collected already) it returns BELLOWS_OK at once: a step loop may wait unconditionally. */
BELLOWS_C_EXPORT int bellows_wait(bellows_trainer* trainer);

/* Fills *options with the defaults (1 sample, seed 0, full ancestral sampling, EMA when present). */
BELLOWS_C_EXPORT void bellows_predict_options_init(bellows_predict_options* options);
/* Predictions for input [rows, features]: the ddpm's samples for the contexts, other models' outputs. The
 * result goes to output->data, which holds `output_capacity` elements of output->dtype (BELLOWS_FLOAT32 or
 * BELLOWS_FLOAT64); output->ndim and output->shape are set. A result larger than the capacity is
 * BELLOWS_ERR_USAGE naming the size needed, and nothing is written. options NULL: the defaults.
 * BELLOWS_ERR_USAGE before any training session or restore. */
BELLOWS_C_EXPORT int bellows_predict(bellows_trainer* trainer, const bellows_tensor* input, bellows_tensor* output, int64_t output_capacity,
                    const bellows_predict_options* options);

/* A checkpoint now, in <run dir>/checkpoints/step-NNNNNNNNN (the format of `bellows train`); its path is
 * copied to path_out (NUL-terminated, when path_out is not NULL and holds path_capacity bytes). */
BELLOWS_C_EXPORT int bellows_save(bellows_trainer* trainer, char* path_out, size_t path_capacity);
/* Weights and training state of a checkpoint (a step-* directory, a checkpoints/ directory or a run directory:
 * its newest valid checkpoint). A corrupt or mismatched one is BELLOWS_ERR_DATA and changes nothing. */
BELLOWS_C_EXPORT int bellows_restore(bellows_trainer* trainer, const char* path);

/* The latest numbers. Any thread. */
BELLOWS_C_EXPORT int bellows_metrics_get(bellows_trainer* trainer, bellows_metrics* out);
/* The run directory's path, copied like bellows_save's. */
BELLOWS_C_EXPORT int bellows_run_dir(bellows_trainer* trainer, char* path_out, size_t path_capacity);

#ifdef __cplusplus
}
#endif

#endif /* BELLOWS_C_H */
