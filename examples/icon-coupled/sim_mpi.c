/* examples/icon-coupled, the MPI driver in C: sim.c's toy simulation with its 8 x 8 coarse grid split among MPI ranks,
 * training one model across them through bellows_c_mpi.h. sim_mpi.f90 is the same program in Fortran; the physics,
 * the layout and the output lines are the same.
 *
 * Each rank simulates its own band of 8 / RANKS coarse rows (16 x 16 fine points per cell, as sim.c) and swaps its
 * edge rows of coarse values with the ranks above and below (periodic, MPI_Sendrecv): the halo its cells' neighbour
 * values and the bilinear baseline need. The first TRAINERS ranks train: they split off a communicator
 * (MPI_Comm_split) and call bellows_create_mpi on it. Every other rank r feeds training rank r % TRAINERS: it sends
 * its cells' samples with MPI every step and never calls bellows. A training rank pushes one block per step, its own
 * cells' samples, then its feeders'. Every training rank thus holds 64 / TRAINERS cells per step; the driver sets
 * data.batch_size to 128 / TRAINERS (a global batch of 128, as sim.c's) and data.stream.ready_samples to 48 steps of
 * its cells (overrides on the command line come after these and win).
 *
 * Every 48 steps the training ranks wait for the running session (collective), every rank evaluates its part of the
 * current step (a training rank predicts the cells it pushed: the mean of 4 samples per cell, each cell drawing from
 * (step, its index in the whole grid) as one process would), the squared errors are summed over the ranks
 * (MPI_Reduce), and the next session starts in the background while the ranks step on. The run's last session trains
 * synchronously, then a checkpoint (collective bellows_save); a second run restarts from it, also on another number of
 * training ranks: with `resume=auto` or with CHECKPOINT (bellows_restore on every training rank).
 *
 *   mpirun -n RANKS sim_mpi_c CONFIG OUTPUT_DIR FIRST_STEP LAST_STEP TRAINERS [CHECKPOINT] [key=value ...]
 *   sim_mpi_c --reference RANKS CONFIG OUTPUT_DIR 1 LAST_STEP TRAINERS [key=value ...]
 * The second form is one process that pushes what the TRAINERS training ranks of a RANKS-rank job push, in the order
 * one process with TRAINERS times their batch sees them (per global batch: training rank 0's batch, then rank 1's,
 * ...): the reference that the job's weights equal within rounding where the model draws no noise (run_mpi.sh).
 *
 * Rank 0 prints "eval step S session N rmse R baseline B samples/s/rank X" per evaluation, "checkpoint PATH", and the
 * time steps spent in bellows_push_block; exits non-zero on any failed call. RANKS divides 8, TRAINERS divides
 * RANKS. */
#include <bellows/bellows_c.h>
#include <bellows/bellows_c_mpi.h> /* defines: bellows_create_mpi */
#include <math.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define NC 8  /* coarse cells per side */
#define NF 16 /* fine points per cell side */
#define CELLS (NC * NC)
#define FINE (NF * NF)
#define CONTEXT 7
#define EVERY 48  /* model steps between training sessions */
#define DRAWS 4   /* samples per cell averaged in an evaluation */
#define BATCH 128 /* the global batch: data.batch_size is BATCH / TRAINERS on every training rank */
#define SPAN 2    /* steps in one training rank's batch: (BATCH / trainers) / (CELLS / trainers) */

static const double kPi = 3.14159265358979323846;

/* Where this process stands: its band of rows, whether it trains, whom it feeds or is fed by. */
typedef struct Layout {
  int rank, ranks, trainers;
  int rows, row0; /* its coarse rows: row0 .. row0 + rows - 1 */
  int up, down;   /* the ranks of the rows above and below (periodic) */
  int training;   /* rank < trainers */
  int trainer;    /* a feeder's training rank */
  int reference;  /* one process playing a job's training ranks */
} Layout;

/* Time spent in bellows_push_block per step: with a session running in the background, and without. */
typedef struct PushTimes {
  double busy_sum, busy_max, idle_sum, idle_max;
  long busy_steps, idle_steps;
} PushTimes;

static int rank_ = 0;

static void check(int status, const char* what) {
  if (status != BELLOWS_OK) {
    fprintf(stderr, "sim_mpi_c rank %d: %s failed (status %d): %s\n", rank_, what, status, bellows_last_error());
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
}

static double large_scale(double x, double y, double t) {
  return sin(2 * kPi * (x - 0.8 * t)) * cos(2 * kPi * (y - 0.3 * t)) + 0.5 * sin(2 * kPi * (2 * x + y) - 1.3 * t);
}

static int wrap(int i) {
  return (i + NC) % NC;
}

/* The fine field of this rank's rows [rows * NF][NC * NF] and their coarse means, into coarse[1 .. rows] (rows 0 and
 * rows + 1 are the halo). The same numbers as sim.c's for those rows. */
static void simulate(const Layout* l, int step, float fine[][NC * NF], double coarse[][NC]) {
  const double t = 0.01 * step;
  const int n = NC * NF;
  for (int ly = 0; ly < l->rows * NF; ++ly) {
    const int gy = l->row0 * NF + ly;
    for (int gx = 0; gx < n; ++gx) {
      const double x = (gx + 0.5) / n, y = (gy + 0.5) / n;
      const double xl = ((gx % NF) + 0.5) / NF, yl = ((gy % NF) + 0.5) / NF;
      const double v = large_scale(x, y, t);
      fine[ly][gx] = (float)(v + 0.8 * tanh(2 * v) * sin(4 * kPi * xl) * sin(4 * kPi * yl));
    }
  }
  for (int lj = 0; lj < l->rows; ++lj) {
    for (int i = 0; i < NC; ++i) {
      double sum = 0;
      for (int a = 0; a < NF; ++a)
        for (int b = 0; b < NF; ++b) sum += fine[lj * NF + a][i * NF + b];
      coarse[lj + 1][i] = sum / FINE;
    }
  }
}

/* The halo: my last row goes down and the row above mine comes from up; my first row goes up and the row below comes
 * from down. One rank swaps with itself. */
static void exchange_halo(const Layout* l, double coarse[][NC]) {
  MPI_Sendrecv(coarse[l->rows], NC, MPI_DOUBLE, l->down, 0, coarse[0], NC, MPI_DOUBLE, l->up, 0, MPI_COMM_WORLD,
               MPI_STATUS_IGNORE);
  MPI_Sendrecv(coarse[1], NC, MPI_DOUBLE, l->up, 1, coarse[l->rows + 1], NC, MPI_DOUBLE, l->down, 1, MPI_COMM_WORLD,
               MPI_STATUS_IGNORE);
}

/* Local rows first .. first + count - 1 as samples (cells in grid order): context [n][7], fine values [n][256]. */
static void samples(int first, int count, float fine[][NC * NF], double coarse[][NC], float context[][CONTEXT],
                    float target[][FINE]) {
  for (int lj = first; lj < first + count; ++lj) {
    const double* row = coarse[lj + 1];
    const double* above = coarse[lj];
    const double* below = coarse[lj + 2];
    for (int i = 0; i < NC; ++i) {
      float* c = context[(lj - first) * NC + i];
      c[0] = (float)row[i];
      c[1] = (float)row[wrap(i + 1)];
      c[2] = (float)row[wrap(i - 1)];
      c[3] = (float)below[i];
      c[4] = (float)above[i];
      c[5] = (float)below[wrap(i + 1)];
      c[6] = (float)above[wrap(i - 1)];
      for (int a = 0; a < NF; ++a)
        for (int b = 0; b < NF; ++b) target[(lj - first) * NC + i][a * NF + b] = fine[lj * NF + a][i * NF + b];
    }
  }
}

/* The bilinear interpolation's squared error over this rank's fine points: rows j0 and j0 + 1 of the coarse field
 * around a fine row lie within the band and its halo. */
static double baseline_sq(const Layout* l, float fine[][NC * NF], double coarse[][NC]) {
  double sq = 0;
  for (int ly = 0; ly < l->rows * NF; ++ly) {
    const int gy = l->row0 * NF + ly;
    for (int gx = 0; gx < NC * NF; ++gx) {
      const double u = (gx + 0.5) / NF - 0.5, v = (gy + 0.5) / NF - 0.5;
      const int i0 = (int)floor(u), j0 = (int)floor(v);
      const double fu = u - i0, fv = v - j0;
      const double* r0 = coarse[j0 - l->row0 + 1];
      const double* r1 = coarse[j0 - l->row0 + 2];
      const double value = (1 - fu) * (1 - fv) * r0[wrap(i0)] + fu * (1 - fv) * r0[wrap(i0 + 1)] +
                           (1 - fu) * fv * r1[wrap(i0)] + fu * fv * r1[wrap(i0 + 1)];
      sq += (value - fine[ly][gx]) * (value - fine[ly][gx]);
    }
  }
  return sq;
}

static bellows_tensor tensor(const char* name, void* data, int ndim, int64_t d0, int64_t d1) {
  bellows_tensor t;
  memset(&t, 0, sizeof t);
  t.name = name;
  t.data = data;
  t.dtype = BELLOWS_FLOAT32;
  t.ndim = ndim;
  t.shape[0] = d0;
  t.shape[1] = d1;
  return t;
}

/* The model's squared error on n cells whose first is cell `first` of the grid: the mean of DRAWS samples. A model that
 * draws none (a regression, config-equal.yaml) refuses several samples: one prediction per cell from then on. */
static double model_sq(bellows_trainer* trainer, float context[][CONTEXT], float target[][FINE], int n, int first,
                       int step) {
  static float out[CELLS * DRAWS * FINE];
  static int draws = DRAWS;
  bellows_tensor input = tensor(NULL, context, 2, n, CONTEXT);
  bellows_tensor output = tensor(NULL, out, 0, 0, 0);
  bellows_predict_options options;
  bellows_predict_options_init(&options);
  options.samples = draws;
  options.seed = (uint64_t)step;
  options.first_index = first; /* cell c draws from (step, c) on whichever rank predicts it */
  int status = bellows_predict(trainer, &input, &output, CELLS * DRAWS * FINE, &options);
  if (status == BELLOWS_ERR_USAGE && draws > 1) {
    draws = options.samples = 1;
    status = bellows_predict(trainer, &input, &output, CELLS * DRAWS * FINE, &options);
  }
  check(status, "bellows_predict");
  double sq = 0;
  for (int c = 0; c < n; ++c) {
    for (int k = 0; k < FINE; ++k) {
      double mean = 0;
      for (int d = 0; d < draws; ++d) mean += out[(c * draws + d) * FINE + k];
      mean /= draws;
      sq += (mean - target[c][k]) * (mean - target[c][k]);
    }
  }
  return sq;
}

/* The per-rank training speed of each session, as rank 0 saw it. */
typedef struct Rates {
  double sum;
  int count;
} Rates;

/* This step's errors, summed over the ranks (every rank calls it): a training rank predicts the cells it pushed, block
 * by block (its own, then each feeder's); every rank adds its rows' baseline. Rank 0 prints the line. */
static void evaluate(const Layout* l, bellows_trainer* trainer, float fine[][NC * NF], double coarse[][NC],
                     float context[][CONTEXT], float target[][FINE], const int* fed, int n_fed, int step,
                     Rates* rates) {
  const int my_cells = l->rows * NC;
  double mine[2] = {0, baseline_sq(l, fine, coarse)}, all[2] = {0, 0};
  if (l->reference) {
    mine[0] = model_sq(trainer, context, target, CELLS, 0, step);
  } else if (l->training) {
    for (int k = 0; k < n_fed; ++k)
      mine[0] += model_sq(trainer, context + k * my_cells, target + k * my_cells, my_cells, fed[k] * my_cells, step);
  }
  MPI_Reduce(mine, all, 2, MPI_DOUBLE, MPI_SUM, 0, MPI_COMM_WORLD);
  if (l->rank != 0) return;
  bellows_metrics m;
  check(bellows_metrics_get(trainer, &m), "bellows_metrics_get");
  /* The session's last logging window counts every rank's samples. */
  const double per_rank = m.samples_per_second / m.ranks;
  rates->sum += per_rank;
  ++rates->count;
  printf("eval step %d session %lld rmse %.4f baseline %.4f samples/s/rank %.0f\n", step, (long long)m.sessions,
         sqrt(all[0] / (CELLS * FINE)), sqrt(all[1] / (CELLS * FINE)), per_rank);
  fflush(stdout);
}

/* The ranks whose cells a training rank pushes, in its order: itself, then its feeders. */
static int fed_ranks(const Layout* l, int trainer, int* out) {
  int n = 0;
  for (int r = trainer; r < l->ranks; r += l->trainers) out[n++] = r;
  return n;
}

static void usage(void) {
  fprintf(
      stderr,
      "usage: mpirun -n RANKS sim_mpi_c CONFIG OUTPUT_DIR FIRST_STEP LAST_STEP TRAINERS [CHECKPOINT] [key=value ...]\n"
      "       sim_mpi_c --reference RANKS CONFIG OUTPUT_DIR 1 LAST_STEP TRAINERS [key=value ...]\n"
      "RANKS divides 8, TRAINERS divides RANKS\n");
}

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  Layout l;
  memset(&l, 0, sizeof l);
  MPI_Comm_rank(MPI_COMM_WORLD, &l.rank);
  MPI_Comm_size(MPI_COMM_WORLD, &l.ranks);
  rank_ = l.rank;
  int arg = 1;
  if (argc > 2 && strcmp(argv[1], "--reference") == 0) {
    l.reference = 1;
    l.ranks = atoi(argv[2]);
    arg = 3;
  }
  if (argc < arg + 5) {
    if (l.rank == 0) usage();
    MPI_Finalize();
    return 2;
  }
  const char* config = argv[arg];
  const int first_step = atoi(argv[arg + 2]), last_step = atoi(argv[arg + 3]);
  l.trainers = atoi(argv[arg + 4]);
  int world = 1;
  MPI_Comm_size(MPI_COMM_WORLD, &world);
  if (l.ranks < 1 || NC % l.ranks != 0 || l.trainers < 1 || l.ranks % l.trainers != 0 || first_step < 1 ||
      last_step < first_step || (l.reference && (world != 1 || first_step != 1))) {
    if (l.rank == 0) usage();
    MPI_Finalize();
    return 2;
  }
  l.rows = NC / l.ranks;
  l.row0 = l.rank * l.rows;
  l.up = (l.rank - 1 + l.ranks) % l.ranks;
  l.down = (l.rank + 1) % l.ranks;
  l.training = l.rank < l.trainers;
  l.trainer = l.rank % l.trainers;
  if (l.reference) { /* one process: every row, halo with itself */
    l.rows = NC;
    l.row0 = 0;
    l.up = l.down = 0;
  }

  /* The overrides: where the runs go, the per-rank batch and session size, then the command line's. */
  const int trainers = l.reference ? 1 : l.trainers; /* the reference is one process with the whole batch */
  const int cells_per_trainer = CELLS / trainers;
  char output_dir[4200], batch[64], ready[64], capacity[64];
  snprintf(output_dir, sizeof output_dir, "output_dir=%s", argv[arg + 1]);
  snprintf(batch, sizeof batch, "data.batch_size=%d", BATCH / trainers);
  snprintf(ready, sizeof ready, "data.stream.ready_samples=%d", EVERY * cells_per_trainer);
  snprintf(capacity, sizeof capacity, "data.stream.capacity=%d", 2 * EVERY * cells_per_trainer);
  const char* overrides[64] = {output_dir, batch, ready, capacity};
  int n_overrides = 4;
  const char* restore_path = NULL;
  for (int i = arg + 5; i < argc && n_overrides < 64; ++i) {
    if (i == arg + 5 && !l.reference && strchr(argv[i], '=') == NULL) {
      restore_path = argv[i];
    } else {
      overrides[n_overrides++] = argv[i];
    }
  }

  /* --- the training ranks' communicator and trainer; feeders take no part --- */
  MPI_Comm training = MPI_COMM_NULL;
  MPI_Comm_split(MPI_COMM_WORLD, l.training ? 0 : MPI_UNDEFINED, l.rank, &training);
  bellows_trainer* trainer = NULL;
  if (l.reference) {
    check(bellows_create(config, overrides, n_overrides, &trainer), "bellows_create");
  } else if (l.training) {
    check(bellows_create_mpi(config, overrides, n_overrides, training, &trainer), "bellows_create_mpi");
    if (restore_path != NULL) check(bellows_restore(trainer, restore_path), "bellows_restore");
  }
  if (l.rank == 0) {
    printf("sim_mpi_c: bellows %s, %d ranks (%d training%s), %d cells per training rank per step, steps %d to %d%s%s\n",
           bellows_version(), l.ranks, l.trainers, l.reference ? "; one process in their place" : "",
           CELLS / l.trainers, first_step, last_step, restore_path ? ", restored from " : "",
           restore_path ? restore_path : "");
    fflush(stdout);
  }

  static float fine[NC * NF][NC * NF], context[CELLS][CONTEXT], target[CELLS][FINE];
  static float staged_context[SPAN][CELLS][CONTEXT], staged_target[SPAN][CELLS][FINE]; /* the reference's */
  static double coarse[NC + 2][NC];
  int fed[NC];
  const int n_fed = fed_ranks(&l, l.trainer, fed);
  const int my_cells = l.rows * NC;
  PushTimes push = {0, 0, 0, 0, 0, 0};
  Rates rates = {0, 0};
  int running = 0;

  for (int step = first_step; step <= last_step; ++step) {
    /* --- step the model; the halo; this step's samples --- */
    simulate(&l, step, fine, coarse);
    exchange_halo(&l, coarse);
    if (l.reference) {
      /* Training rank t's block of this step: the rows of ranks t, t + T, ... in turn; pushed a batch span at a time,
       * per span training rank 0's block, then rank 1's... */
      const int band = NC / l.ranks, slot = (step - 1) % SPAN;
      for (int t = 0, c = 0; t < l.trainers; ++t) {
        int ranks_of_t[NC];
        const int n = fed_ranks(&l, t, ranks_of_t);
        for (int k = 0; k < n; ++k, c += band * NC)
          samples(ranks_of_t[k] * band, band, fine, coarse, staged_context[slot] + c, staged_target[slot] + c);
      }
      if (slot == SPAN - 1) {
        const int per_trainer = CELLS / l.trainers;
        for (int t = 0; t < l.trainers; ++t) {
          for (int s = 0; s < SPAN; ++s) {
            bellows_tensor block[2] = {tensor("x", staged_context[s][t * per_trainer], 2, per_trainer, CONTEXT),
                                       tensor("y", staged_target[s][t * per_trainer], 2, per_trainer, FINE)};
            check(bellows_push_block(trainer, block, 2), "bellows_push_block");
          }
        }
      }
      samples(0, NC, fine, coarse, context, target); /* the whole grid, for the evaluation */
    } else {
      samples(0, l.rows, fine, coarse, context, target);
      if (!l.training) {
        MPI_Send(context, my_cells * CONTEXT, MPI_FLOAT, l.trainer, 10, MPI_COMM_WORLD);
        MPI_Send(target, my_cells * FINE, MPI_FLOAT, l.trainer, 11, MPI_COMM_WORLD);
      } else {
        for (int k = 1; k < n_fed; ++k) {
          MPI_Recv(context[k * my_cells], my_cells * CONTEXT, MPI_FLOAT, fed[k], 10, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
          MPI_Recv(target[k * my_cells], my_cells * FINE, MPI_FLOAT, fed[k], 11, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        }
        bellows_tensor block[2] = {tensor("x", context, 2, n_fed * my_cells, CONTEXT),
                                   tensor("y", target, 2, n_fed * my_cells, FINE)};
        const double start = MPI_Wtime();
        check(bellows_push_block(trainer, block, 2), "bellows_push_block"); /* also while a session trains */
        const double took = MPI_Wtime() - start;
        if (running) {
          push.busy_sum += took;
          push.busy_max = fmax(push.busy_max, took);
          ++push.busy_steps;
        } else {
          push.idle_sum += took;
          push.idle_max = fmax(push.idle_max, took);
          ++push.idle_steps;
        }
      }
    }
    if (step % EVERY != 0) continue;

    /* --- every 48 steps: the finished session, an evaluation, the next session (the run's last synchronously) --- */
    if (running) {
      if (trainer != NULL) check(bellows_wait(trainer), "bellows_wait");
      running = 0;
      evaluate(&l, trainer, fine, coarse, context, target, fed, n_fed, step, &rates);
    }
    if (step + EVERY > last_step) {
      if (trainer != NULL) check(bellows_train(trainer, 0), "bellows_train");
      evaluate(&l, trainer, fine, coarse, context, target, fed, n_fed, step, &rates);
    } else {
      if (trainer != NULL) check(bellows_train_async(trainer, 0), "bellows_train_async");
      running = 1;
    }
  }
  if (running && trainer != NULL) check(bellows_wait(trainer), "bellows_wait");

  /* --- a checkpoint (collective), the numbers, the end --- */
  char path[4096] = "";
  if (trainer != NULL) check(bellows_save(trainer, path, sizeof path), "bellows_save");
  long long pushed = 0, pushed_all = 0;
  if (trainer != NULL) {
    bellows_metrics m;
    check(bellows_metrics_get(trainer, &m), "bellows_metrics_get");
    pushed = m.pushed;
    if (l.rank == 0)
      printf(
          "sim_mpi_c: %lld optimizer steps, %lld sessions, last loss %.4f; %.0f samples/s per training rank (mean of "
          "%d sessions' last "
          "logging windows)\n",
          (long long)m.step, (long long)m.sessions, m.loss, rates.count ? rates.sum / rates.count : 0.0, rates.count);
  }
  double sums[4] = {push.busy_sum, (double)push.busy_steps, push.idle_sum, (double)push.idle_steps}, all_sums[4];
  double maxima[2] = {push.busy_max, push.idle_max}, all_maxima[2];
  MPI_Reduce(sums, all_sums, 4, MPI_DOUBLE, MPI_SUM, 0, MPI_COMM_WORLD);
  MPI_Reduce(maxima, all_maxima, 2, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD);
  MPI_Reduce(&pushed, &pushed_all, 1, MPI_LONG_LONG, MPI_SUM, 0, MPI_COMM_WORLD);
  if (l.rank == 0) {
    printf("sim_mpi_c: %lld samples pushed in all\n", pushed_all);
    if (!l.reference)
      printf(
          "push wait per step: during a session %.0f us mean, %.0f us max (%.0f steps of the training ranks); without "
          "one %.0f us mean, "
          "%.0f us max (%.0f steps)\n",
          1e6 * all_sums[0] / fmax(all_sums[1], 1), 1e6 * all_maxima[0], all_sums[1],
          1e6 * all_sums[2] / fmax(all_sums[3], 1), 1e6 * all_maxima[1], all_sums[3]);
    printf("checkpoint %s\n", path);
  }
  if (trainer != NULL) check(bellows_destroy(trainer), "bellows_destroy");
  if (training != MPI_COMM_NULL) MPI_Comm_free(&training);
  MPI_Finalize();
  return 0;
}
