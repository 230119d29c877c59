/* One model trained across a program's MPI ranks (bellows_c_mpi.h), as a simulation does it: each rank pushes the
 * samples it holds, sessions are collective (a synchronous one, then one in the background while the ranks push on),
 * save and restore are collective, predictions local. Run by CTest (tests/CMakeLists.txt) in these modes:
 *
 *   mpirun -n W mpi_sessions job DIR        W ranks train; rank 0 writes DIR/pred-job-W.bin (predictions of a fixed
 *                                           input) and every rank checks that its replica predicts the same
 *   mpi_sessions reference DIR W            one process pushes what the W ranks pushed (their batches side by side)
 *                                           at W times the batch: DIR/pred-ref-W.bin
 *   mpi_sessions compare A B TOLERANCE      the largest difference of two prediction files, relative to the largest
 *                                           value; exit 1 above TOLERANCE
 *   mpirun -n V mpi_sessions restart DIR W  V ranks continue the W ranks' run (resume: auto): the same predictions
 *                                           bitwise, the session count goes on, one more session trains and saves
 *   mpirun -n 2 mpi_sessions misuse DIR     different configs, different collective calls, too few samples on one
 *                                           rank, a rank that does not make the call: statuses and messages
 *   mpi_sessions kill DIR RANK PORT         two processes (bellows_create_job, no mpirun: Open MPI ends the job when
 *                                           a rank dies): rank 1 kills itself during a background session, rank 0
 *                                           returns BELLOWS_ERR_RESOURCE naming it within dist.timeout_s
 *
 * Each sample is a pure function of (stream, index): rank r pushes stream r, so a session that takes the same number
 * of samples on every rank takes the same indices, and the reference can push them in the order of one process. */
#define _POSIX_C_SOURCE 200809L

#include <math.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <mpi.h>

#include "bellows/bellows_c.h"
#include "bellows/bellows_c_mpi.h"

enum { kIn = 4, kOut = 2, kBatch = 16, kSession = 64, kRows = 8 };

static int failures = 0;
static int rank_ = 0;

static void check(int ok, const char* what, ...) {
  if (ok) return;
  va_list args;
  va_start(args, what);
  fprintf(stderr, "rank %d: FAILED: ", rank_);
  vfprintf(stderr, what, args);
  fprintf(stderr, "\n");
  va_end(args);
  ++failures;
}

static int expect(int got, int want, const char* call) {
  check(got == want, "%s returned %d, expected %d: %s", call, got, want, bellows_last_error());
  return got == want;
}

static int contains(const char* text, const char* part) { return strstr(text, part) != NULL; }

/* The config of every mode: a small MLP regression, its batches in order (the reference can then match them). */
static char* config(const char* dir, int batch) {
  static char text[4096];
  snprintf(text, sizeof text,
           "name: coupled\n"
           "seed: 0\n"
           "output_dir: %s/runs\n"
           "threads: 1\n"
           "online: {console: none}\n"
           "data:\n"
           "  source: stream\n"
           "  stream: {capacity: 4096, ready_samples: %d}\n"
           "  batch_size: %d\n"
           "  shuffle: false\n"
           "  val_fraction: 0\n"
           "model: {name: mlp, in_features: %d, out_features: %d, hidden: [16]}\n"
           "precision: fp32\n"
           "optim: {type: adamw, lr: 0.01}\n"
           "train: {epochs: 2}\n"
           "schedule: {type: constant}\n"
           "checkpoint: {enabled: false}\n"
           "dist: {timeout_s: 20}\n",
           dir, kSession, batch, kIn, kOut);
  return text;
}

/* Sample `index` of stream `stream`: x in [-1, 1], y a smooth function of x. */
static void sample(int stream, int64_t index, float* x, float* y) {
  for (int j = 0; j < kIn; ++j) x[j] = sinf(0.37f * (float)(stream * 1000 + index) + 0.9f * (float)j);
  y[0] = x[0] * x[1] + 0.5f * x[2];
  y[1] = cosf(x[3]) - x[0];
}

static int push(bellows_trainer* t, int stream, int64_t first, int64_t n) {
  float* x = malloc(sizeof(float) * (size_t)(n * kIn));
  float* y = malloc(sizeof(float) * (size_t)(n * kOut));
  for (int64_t i = 0; i < n; ++i) sample(stream, first + i, x + i * kIn, y + i * kOut);
  bellows_tensor ts[2] = {{"x", x, BELLOWS_FLOAT32, 2, {n, kIn}}, {"y", y, BELLOWS_FLOAT32, 2, {n, kOut}}};
  const int status = bellows_push_block(t, ts, 2);
  free(x);
  free(y);
  return status;
}

/* Predictions for a fixed input, [kRows, kOut]. */
static int predict(bellows_trainer* t, float* out) {
  float x[kRows * kIn];
  for (int i = 0; i < kRows * kIn; ++i) x[i] = cosf(0.3f * (float)i);
  bellows_tensor input = {NULL, x, BELLOWS_FLOAT32, 2, {kRows, kIn}};
  bellows_tensor output = {NULL, out, BELLOWS_FLOAT32, 0, {0}};
  return bellows_predict(t, &input, &output, kRows * kOut, NULL);
}

static void write_file(const char* path, const float* v, size_t n) {
  FILE* f = fopen(path, "wb");
  check(f != NULL && fwrite(v, sizeof(float), n, f) == n, "cannot write %s", path);
  if (f) fclose(f);
}

static int read_file(const char* path, float* v, size_t n) {
  FILE* f = fopen(path, "rb");
  const int ok = f != NULL && fread(v, sizeof(float), n, f) == n;
  if (f) fclose(f);
  return ok;
}

/* Every rank's predictions equal rank 0's (replicas of one model). */
static void same_on_every_rank(const float* mine, const char* when) {
  float first[kRows * kOut];
  memcpy(first, mine, sizeof first);
  MPI_Bcast(first, kRows * kOut, MPI_FLOAT, 0, MPI_COMM_WORLD);
  int differ = memcmp(first, mine, sizeof first) != 0, any = 0;
  MPI_Allreduce(&differ, &any, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  check(!any, "%s: the ranks' replicas predict differently", when);
}

static double seconds(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* W ranks: session 1 (synchronous) on uneven buffers, session 2 in the background while the ranks push on, a save. */
static void job(const char* dir) {
  int size = 1;
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  bellows_trainer* t = NULL;
  if (!expect(bellows_create_mpi_from_string(config(dir, kBatch), NULL, 0, MPI_COMM_WORLD, &t), BELLOWS_OK, "bellows_create_mpi")) return;
  bellows_metrics m;
  expect(bellows_metrics_get(t, &m), BELLOWS_OK, "bellows_metrics_get");
  check(m.rank == rank_ && m.ranks == size, "metrics say rank %d of %d", m.rank, m.ranks);
  /* Session 1: rank r holds 64 + 16 r samples; every rank takes 64 (the fewest), the rest wait. */
  expect(push(t, rank_, 0, kSession + 16 * rank_), BELLOWS_OK, "push");
  expect(bellows_train(t, 0), BELLOWS_OK, "bellows_train");
  expect(bellows_metrics_get(t, &m), BELLOWS_OK, "bellows_metrics_get");
  check(m.step == 2 * kSession / kBatch && m.sessions == 1, "after session 1: step %lld, sessions %lld", (long long)m.step,
        (long long)m.sessions);
  check(m.buffered == 16 * rank_, "after session 1 rank %d keeps %lld samples, expected %d", rank_, (long long)m.buffered, 16 * rank_);
  /* Session 2 in the background: 64 more each (rank r then holds 64 + 16 r again); the ranks push on while it trains. */
  expect(push(t, rank_, kSession + 16 * rank_, kSession), BELLOWS_OK, "push");
  expect(bellows_train_async(t, 0), BELLOWS_OK, "bellows_train_async");
  expect(push(t, rank_, 2 * kSession + 16 * rank_, 8), BELLOWS_OK, "push during the session");
  const int polled = bellows_poll(t);
  check(polled == BELLOWS_OK || polled == BELLOWS_RUNNING, "bellows_poll returned %d", polled);
  expect(bellows_wait(t), BELLOWS_OK, "bellows_wait");
  expect(bellows_wait(t), BELLOWS_OK, "a second bellows_wait (nothing to wait for)");
  expect(bellows_metrics_get(t, &m), BELLOWS_OK, "bellows_metrics_get");
  check(m.step == 4 * kSession / kBatch && m.sessions == 2, "after session 2: step %lld, sessions %lld", (long long)m.step,
        (long long)m.sessions);
  check(m.buffered == 16 * rank_ + 8, "after session 2 rank %d keeps %lld samples", rank_, (long long)m.buffered);
  char path[4096];
  expect(bellows_save(t, path, sizeof path), BELLOWS_OK, "bellows_save");
  float out[kRows * kOut];
  if (expect(predict(t, out), BELLOWS_OK, "bellows_predict")) {
    same_on_every_rank(out, "after two sessions");
    if (rank_ == 0) {
      char file[4096];
      snprintf(file, sizeof file, "%s/pred-job-%d.bin", dir, size);
      write_file(file, out, kRows * kOut);
      printf("rank 0: two sessions on %d ranks, checkpoint %s\n", size, path);
    }
  }
  expect(bellows_destroy(t), BELLOWS_OK, "bellows_destroy");
}

/* One process, the W ranks' samples in the order one process with W times the batch sees them: per batch, each rank's
 * part of it. Each session took samples [64 s, 64 s + 64) of every rank's stream. */
static void reference(const char* dir, int ranks) {
  bellows_trainer* t = NULL;
  if (!expect(bellows_create_from_string(config(dir, kBatch * ranks), NULL, 0, &t), BELLOWS_OK, "bellows_create")) return;
  for (int session = 0; session < 2; ++session) {
    for (int b = 0; b < kSession / kBatch; ++b) {
      for (int r = 0; r < ranks; ++r) expect(push(t, r, session * kSession + b * kBatch, kBatch), BELLOWS_OK, "push");
    }
    expect(bellows_train(t, kSession * ranks), BELLOWS_OK, "bellows_train");
  }
  float out[kRows * kOut];
  if (expect(predict(t, out), BELLOWS_OK, "bellows_predict")) {
    char file[4096];
    snprintf(file, sizeof file, "%s/pred-ref-%d.bin", dir, ranks);
    write_file(file, out, kRows * kOut);
  }
  expect(bellows_destroy(t), BELLOWS_OK, "bellows_destroy");
}

static void compare(const char* a, const char* b, double tolerance) {
  float x[kRows * kOut], y[kRows * kOut];
  if (!read_file(a, x, kRows * kOut) || !read_file(b, y, kRows * kOut)) {
    check(0, "cannot read %s or %s", a, b);
    return;
  }
  double diff = 0, scale = 0;
  for (int i = 0; i < kRows * kOut; ++i) {
    diff = fmax(diff, fabs((double)x[i] - (double)y[i]));
    scale = fmax(scale, fabs((double)y[i]));
  }
  printf("largest difference %.3g, relative to the largest value %.3g: %.3g (tolerance %.3g)\n", diff, scale, diff / scale, tolerance);
  check(diff / scale <= tolerance, "%s and %s differ by %.3g relative", a, b, diff / scale);
}

/* V ranks continue the run of W: the same weights, the session count, one more session, a save. */
static void restart(const char* dir, int before) {
  int size = 1;
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  const char* resume[] = {"resume=auto"};
  bellows_trainer* t = NULL;
  if (!expect(bellows_create_mpi_from_string(config(dir, kBatch), resume, 1, MPI_COMM_WORLD, &t), BELLOWS_OK, "bellows_create_mpi (resume)"))
    return;
  bellows_metrics m;
  expect(bellows_metrics_get(t, &m), BELLOWS_OK, "bellows_metrics_get");
  check(m.restored == 1 && m.sessions == 2 && m.step == 4 * kSession / kBatch, "restored %d, sessions %lld, step %lld", m.restored,
        (long long)m.sessions, (long long)m.step);
  float out[kRows * kOut], saved[kRows * kOut];
  char file[4096];
  snprintf(file, sizeof file, "%s/pred-job-%d.bin", dir, before);
  if (expect(predict(t, out), BELLOWS_OK, "bellows_predict")) {
    check(read_file(file, saved, kRows * kOut) && memcmp(out, saved, sizeof out) == 0,
          "%d ranks restored from %d predict otherwise than the run that saved", size, before);
  }
  expect(push(t, 10 + rank_, 0, kSession), BELLOWS_OK, "push");
  expect(bellows_train(t, 0), BELLOWS_OK, "bellows_train");
  expect(bellows_metrics_get(t, &m), BELLOWS_OK, "bellows_metrics_get");
  check(m.sessions == 3 && m.step == 6 * kSession / kBatch, "after the restart's session: sessions %lld, step %lld", (long long)m.sessions,
        (long long)m.step);
  expect(bellows_save(t, NULL, 0), BELLOWS_OK, "bellows_save");
  if (expect(predict(t, out), BELLOWS_OK, "bellows_predict")) same_on_every_rank(out, "after the restart's session");
  if (rank_ == 0) printf("rank 0: %d ranks continued the run of %d ranks\n", size, before);
  expect(bellows_destroy(t), BELLOWS_OK, "bellows_destroy");
}

/* Wrong uses on two ranks: each a status and a message on every rank, nothing hangs past dist.timeout_s. */
static void misuse(const char* dir) {
  bellows_trainer* t = NULL;
  /* Different configs: refused at the rendezvous, on both ranks. */
  const char* other_seed[] = {"seed=1"};
  const int created = bellows_create_mpi_from_string(config(dir, kBatch), other_seed, rank_ == 1 ? 1 : 0, MPI_COMM_WORLD, &t);
  check(created == BELLOWS_ERR_CONFIG && contains(bellows_last_error(), "different config"), "different configs: %d %s", created,
        bellows_last_error());
  check(t == NULL, "a failed create left a handle");
  /* A communicator that is none. */
  check(bellows_create_mpi_from_string(config(dir, kBatch), NULL, 0, MPI_COMM_NULL, &t) == BELLOWS_ERR_USAGE, "MPI_COMM_NULL: %s",
        bellows_last_error());

  const char* quick[] = {"dist.timeout_s=5"};
  if (!expect(bellows_create_mpi_from_string(config(dir, kBatch), quick, 1, MPI_COMM_WORLD, &t), BELLOWS_OK, "bellows_create_mpi")) return;
  /* Different collective calls: rank 0 trains, rank 1 saves. */
  expect(push(t, rank_, 0, kSession), BELLOWS_OK, "push");
  const int call = rank_ == 0 ? bellows_train(t, 0) : bellows_save(t, NULL, 0);
  check(call == BELLOWS_ERR_USAGE, "different calls returned %d", call);
  check(contains(bellows_last_error(), rank_ == 0 ? "rank 1 made save (bellows_save)" : "rank 0 made a training session"),
        "different calls: %s", bellows_last_error());
  /* Too few samples on rank 1: no rank trains, both are told which rank has how many. */
  int64_t extra = 0;
  const int short_session = bellows_train(t, rank_ == 0 ? 0 : 2 * kSession);
  check(short_session == BELLOWS_NOT_READY && contains(bellows_last_error(), "the session needs 128 on every rank"),
        "too few samples: %d %s", short_session, bellows_last_error());
  bellows_buffered(t, &extra);
  check(extra == kSession, "a refused session took samples: %lld left", (long long)extra);
  /* A session, a save, then a restore that rank 1 cannot read: no rank restores, both are told. */
  expect(bellows_train(t, 0), BELLOWS_OK, "bellows_train");
  char path[4096];
  expect(bellows_save(t, path, sizeof path), BELLOWS_OK, "bellows_save");
  char missing[4200];
  snprintf(missing, sizeof missing, "%s-missing", path);
  const int restored = bellows_restore(t, rank_ == 0 ? path : missing);
  check(restored == BELLOWS_ERR_DATA && (rank_ == 1 || contains(bellows_last_error(), "rank 1 could not read its checkpoint")),
        "a restore rank 1 cannot read: %d %s", restored, bellows_last_error());
  /* Rank 1 does not come: rank 0 fails within dist.timeout_s (5 s) naming the vote; later collective calls fail at once. */
  MPI_Barrier(MPI_COMM_WORLD);
  if (rank_ == 0) {
    const double start = seconds();
    const int alone = bellows_train(t, 0);
    const double took = seconds() - start;
    check(alone == BELLOWS_ERR_RESOURCE && contains(bellows_last_error(), "the vote that opens collective call"), "alone: %d %s", alone,
          bellows_last_error());
    check(took < 5 + 0.5 + 2, "the lonely call took %.1f s with dist.timeout_s 5 (its timeout, then half a second to find who answers)", took);
    printf("rank 0: a session rank 1 did not join failed after %.1f s: %s\n", took, bellows_last_error());
    const double start2 = seconds();
    const int after = bellows_save(t, NULL, 0);
    check(after == BELLOWS_ERR_RESOURCE && contains(bellows_last_error(), "lost each other at an earlier collective call") &&
              seconds() - start2 < 1,
          "a call after the failure: %d %s", after, bellows_last_error());
    float out[kRows * kOut];
    expect(predict(t, out), BELLOWS_OK, "bellows_predict after the failure");  /* local calls still answer */
  }
  MPI_Barrier(MPI_COMM_WORLD);
  /* The rank that stayed away calls late: rank 0 no longer takes part, so rank 1 fails too, within its timeout. */
  if (rank_ == 1) {
    const double start = seconds();
    const int late = bellows_train(t, 0);
    const double took = seconds() - start;
    check(late == BELLOWS_ERR_RESOURCE, "the late call: %d %s", late, bellows_last_error());
    check(took < 5 + 0.5 + 2, "the late call took %.1f s with dist.timeout_s 5", took);
    printf("rank 1: its late session failed after %.1f s: %s\n", took, bellows_last_error());
  }
  MPI_Barrier(MPI_COMM_WORLD);
  expect(bellows_destroy(t), BELLOWS_OK, "bellows_destroy");
}

/* Rank 1 dies (SIGKILL) inside a background session, right after the session's vote (the steps have begun); rank 0's
 * wait returns BELLOWS_ERR_RESOURCE naming it; its trained model still predicts, collective calls are refused. */
static void killed(const char* dir, int rank, const char* port) {
  rank_ = rank;
  char rendezvous[64];
  snprintf(rendezvous, sizeof rendezvous, "127.0.0.1:%s", port);
  const bellows_job job = {rank, 2, rank, 2, rendezvous};
  bellows_trainer* t = NULL;
  if (!expect(bellows_create_job_from_string(config(dir, kBatch), NULL, 0, &job, &t), BELLOWS_OK, "bellows_create_job")) return;
  expect(push(t, rank, 0, kSession), BELLOWS_OK, "push");
  expect(bellows_train(t, 0), BELLOWS_OK, "bellows_train");
  expect(push(t, rank, kSession, kSession), BELLOWS_OK, "push");
  expect(bellows_train_async(t, 0), BELLOWS_OK, "bellows_train_async");
  if (rank == 1) raise(SIGKILL);
  const double start = seconds();
  const int status = bellows_wait(t);
  const double took = seconds() - start;
  check(status == BELLOWS_ERR_RESOURCE && contains(bellows_last_error(), "rank 1 did not answer"), "the survivor's wait: %d %s", status,
        bellows_last_error());
  check(took < 20 + 2 + 2, "the survivor waited %.1f s with dist.timeout_s 20", took);
  printf("rank 0: rank 1 was killed; wait returned %d after %.1f s: %s\n", status, took, bellows_last_error());
  expect(bellows_save(t, NULL, 0), BELLOWS_ERR_RESOURCE, "bellows_save after the loss");
  float out[kRows * kOut];
  expect(predict(t, out), BELLOWS_OK, "bellows_predict after the loss");
  expect(bellows_destroy(t), BELLOWS_OK, "bellows_destroy");
}

int main(int argc, char** argv) {
  if (argc < 3) {
    fprintf(stderr, "usage: mpi_sessions job|reference|compare|restart|misuse|kill DIR [...]\n");
    return 2;
  }
  const char* mode = argv[1];
  if (strcmp(mode, "compare") == 0 && argc == 5) {
    compare(argv[2], argv[3], atof(argv[4]));
  } else if (strcmp(mode, "reference") == 0 && argc == 4) {
    reference(argv[2], atoi(argv[3]));
  } else if (strcmp(mode, "kill") == 0 && argc == 5) {
    killed(argv[2], atoi(argv[3]), argv[4]);
  } else {
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank_);
    if (strcmp(mode, "job") == 0) {
      job(argv[2]);
    } else if (strcmp(mode, "restart") == 0 && argc == 4) {
      restart(argv[2], atoi(argv[3]));
    } else if (strcmp(mode, "misuse") == 0) {
      misuse(argv[2]);
    } else {
      fprintf(stderr, "unknown mode %s\n", mode);
      ++failures;
    }
    int all = 0;
    MPI_Allreduce(&failures, &all, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    MPI_Finalize();
    if (rank_ == 0) printf("%d passed, %d failed\n", all == 0 ? 1 : 0, all == 0 ? 0 : 1);
    return all == 0 ? 0 : 1;
  }
  printf("%s\n", failures == 0 ? "ok" : "failed");
  return failures == 0 ? 0 : 1;
}
