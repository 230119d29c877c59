/* examples/icon-coupled, the C driver: a toy "simulation" that trains bellows' conditional diffusion model
 * online through the C API (bellows/bellows_c.h), as seed 002 does inside ICON. sim.f90 is the same program in
 * Fortran; the physics and the output lines are the same.
 *
 * The model: a periodic square of 8 x 8 coarse cells, each 16 x 16 fine points. The fine field is an
 * advected large-scale pattern L(x, y, t) plus sub-grid structure whose sign and strength follow L:
 *   fine = L + 0.8 tanh(2 L) sin(4 pi xl) sin(4 pi yl)      (xl, yl: the position inside the cell, in [0, 1))
 * and a coarse cell's value is the mean of its fine points. Every model step each cell is one sample: its
 * coarse value and those of 6 neighbours (7 context values) -> its 256 fine values. The baseline is the
 * bilinear interpolation of the coarse field to the fine points, which cannot know the sub-grid term.
 *
 * Every 48 steps the driver waits for the last training session (if one runs), measures the model on the
 * current step (RMSE of the mean of 4 samples per cell against the true fine field, and the baseline's RMSE),
 * and starts the next session on a background thread over the 48 steps just pushed; the pushes of the next 48
 * steps go on meanwhile. Half-way it trains the last 48 steps synchronously, saves a checkpoint, creates a new
 * trainer, restores the checkpoint into it and destroys the old one: the restart of a simulation inside one
 * process (sim.f90 restarts as a second program run instead).
 *
 *   sim_c CONFIG OUTPUT_DIR STEPS [key=value ...]
 * prints "eval step S session N rmse R baseline B" per evaluation, and exits non-zero on any failed call. */
#include <bellows/bellows_c.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define NC 8                   /* coarse cells per side */
#define NF 16                  /* fine points per cell side */
#define CELLS (NC * NC)
#define FINE (NF * NF)
#define CONTEXT 7
#define EVERY 48               /* model steps between training sessions */
#define DRAWS 4                /* samples per cell averaged in an evaluation */

static const double kPi = 3.14159265358979323846;

/* The large-scale pattern at (x, y) in [0, 1)^2 and model time t: advected waves. */
static double large_scale(double x, double y, double t) {
  return sin(2 * kPi * (x - 0.8 * t)) * cos(2 * kPi * (y - 0.3 * t)) + 0.5 * sin(2 * kPi * (2 * x + y) - 1.3 * t);
}

/* The fine field of step `step` [NC*NF][NC*NF] (row y, column x) and its coarse cell means [NC][NC]. */
static void simulate(int step, float fine[NC * NF][NC * NF], double coarse[NC][NC]) {
  const double t = 0.01 * step;
  const int n = NC * NF;
  for (int gy = 0; gy < n; ++gy) {
    for (int gx = 0; gx < n; ++gx) {
      const double x = (gx + 0.5) / n, y = (gy + 0.5) / n;
      const double xl = ((gx % NF) + 0.5) / NF, yl = ((gy % NF) + 0.5) / NF;
      const double l = large_scale(x, y, t);
      fine[gy][gx] = (float)(l + 0.8 * tanh(2 * l) * sin(4 * kPi * xl) * sin(4 * kPi * yl));
    }
  }
  for (int j = 0; j < NC; ++j) {
    for (int i = 0; i < NC; ++i) {
      double sum = 0;
      for (int a = 0; a < NF; ++a)
        for (int b = 0; b < NF; ++b) sum += fine[j * NF + a][i * NF + b];
      coarse[j][i] = sum / FINE;
    }
  }
}

static int wrap(int i) { return (i + NC) % NC; }

/* One sample per cell (cell index j * NC + i): context [CELLS][7], fine values [CELLS][256] (row-major). */
static void samples(float fine[NC * NF][NC * NF], double coarse[NC][NC], float context[CELLS][CONTEXT], float target[CELLS][FINE]) {
  for (int j = 0; j < NC; ++j) {
    for (int i = 0; i < NC; ++i) {
      float* c = context[j * NC + i];
      c[0] = (float)coarse[j][i];
      c[1] = (float)coarse[j][wrap(i + 1)];
      c[2] = (float)coarse[j][wrap(i - 1)];
      c[3] = (float)coarse[wrap(j + 1)][i];
      c[4] = (float)coarse[wrap(j - 1)][i];
      c[5] = (float)coarse[wrap(j + 1)][wrap(i + 1)];
      c[6] = (float)coarse[wrap(j - 1)][wrap(i - 1)];
      for (int a = 0; a < NF; ++a)
        for (int b = 0; b < NF; ++b) target[j * NC + i][a * NF + b] = fine[j * NF + a][i * NF + b];
    }
  }
}

/* RMSE of the bilinear interpolation of the coarse field (values at cell centres, periodic) at the fine points. */
static double baseline_rmse(float fine[NC * NF][NC * NF], double coarse[NC][NC]) {
  const int n = NC * NF;
  double sq = 0;
  for (int gy = 0; gy < n; ++gy) {
    for (int gx = 0; gx < n; ++gx) {
      const double u = (gx + 0.5) / NF - 0.5, v = (gy + 0.5) / NF - 0.5; /* in coarse-centre units */
      const int i0 = (int)floor(u), j0 = (int)floor(v);
      const double fu = u - i0, fv = v - j0;
      const double value = (1 - fu) * (1 - fv) * coarse[wrap(j0)][wrap(i0)] + fu * (1 - fv) * coarse[wrap(j0)][wrap(i0 + 1)] +
                           (1 - fu) * fv * coarse[wrap(j0 + 1)][wrap(i0)] + fu * fv * coarse[wrap(j0 + 1)][wrap(i0 + 1)];
      sq += (value - fine[gy][gx]) * (value - fine[gy][gx]);
    }
  }
  return sqrt(sq / (n * n));
}

static void check(int status, const char* what) {
  if (status != BELLOWS_OK) {
    fprintf(stderr, "sim_c: %s failed (status %d): %s\n", what, status, bellows_last_error());
    exit(1);
  }
}

static bellows_tensor tensor(const char* name, void* data, int ndim, int64_t d0, int64_t d1, int64_t d2) {
  bellows_tensor t;
  memset(&t, 0, sizeof t);
  t.name = name;
  t.data = data;
  t.dtype = BELLOWS_FLOAT32;
  t.ndim = ndim;
  t.shape[0] = d0;
  t.shape[1] = d1;
  t.shape[2] = d2;
  return t;
}

/* The model's RMSE on this step's cells: the mean of DRAWS samples per cell against the true fine values. */
static double model_rmse(bellows_trainer* trainer, float context[CELLS][CONTEXT], float target[CELLS][FINE], int step) {
  static float out[CELLS * DRAWS * FINE];
  bellows_tensor input = tensor(NULL, context, 2, CELLS, CONTEXT, 0);
  bellows_tensor output = tensor(NULL, out, 0, 0, 0, 0);
  bellows_predict_options options;
  bellows_predict_options_init(&options);
  options.samples = DRAWS;
  options.seed = (uint64_t)step;
  check(bellows_predict(trainer, &input, &output, CELLS * DRAWS * FINE, &options), "bellows_predict");
  if (output.ndim != 3 || output.shape[0] != CELLS || output.shape[1] != DRAWS || output.shape[2] != FINE) {
    fprintf(stderr, "sim_c: unexpected prediction shape\n");
    exit(1);
  }
  double sq = 0;
  for (int c = 0; c < CELLS; ++c) {
    for (int k = 0; k < FINE; ++k) {
      double mean = 0;
      for (int d = 0; d < DRAWS; ++d) mean += out[(c * DRAWS + d) * FINE + k];
      mean /= DRAWS;
      sq += (mean - target[c][k]) * (mean - target[c][k]);
    }
  }
  return sqrt(sq / (CELLS * FINE));
}

int main(int argc, char** argv) {
  if (argc < 4) {
    fprintf(stderr, "usage: sim_c CONFIG OUTPUT_DIR STEPS [key=value ...]\n");
    return 2;
  }
  if (bellows_api_version() != BELLOWS_C_API_VERSION) {
    fprintf(stderr, "sim_c: built against C API %d, running with %d\n", BELLOWS_C_API_VERSION, bellows_api_version());
    return 1;
  }
  const int steps = atoi(argv[3]);
  char output_dir[4200];
  snprintf(output_dir, sizeof output_dir, "output_dir=%s", argv[2]);
  const char* overrides[64];
  int n = 0;
  overrides[n++] = output_dir;
  for (int i = 4; i < argc && n < 64; ++i) overrides[n++] = argv[i];

  static float fine[NC * NF][NC * NF], context[CELLS][CONTEXT], target[CELLS][FINE];
  static double coarse[NC][NC];
  bellows_trainer* trainer = NULL;
  check(bellows_create(argv[1], overrides, n, &trainer), "bellows_create");
  printf("sim_c: bellows %s, %d cells x %d steps, a session every %d steps\n", bellows_version(), CELLS, steps, EVERY);

  /* Predicting before any training is refused, and the program goes on. */
  simulate(0, fine, coarse);
  samples(fine, coarse, context, target);
  {
    float out[CELLS * FINE];
    bellows_tensor input = tensor(NULL, context, 2, CELLS, CONTEXT, 0), output = tensor(NULL, out, 0, 0, 0, 0);
    const int status = bellows_predict(trainer, &input, &output, CELLS * FINE, NULL);
    printf("sim_c: predict before training: status %d (%s)\n", status, bellows_last_error());
    if (status != BELLOWS_ERR_USAGE) return 1;
  }

  int sessions = 0, running = 0;
  for (int step = 1; step <= steps; ++step) {
    simulate(step, fine, coarse);
    samples(fine, coarse, context, target);
    bellows_tensor block[2] = {tensor("x", context, 2, CELLS, CONTEXT, 0), tensor("y", target, 2, CELLS, FINE, 0)};
    check(bellows_push_block(trainer, block, 2), "bellows_push_block");  /* also while a session trains */

    if (step % EVERY == 0) {
      if (running) {
        check(bellows_wait(trainer), "bellows_wait");
        running = 0;
        ++sessions;
        printf("eval step %d session %d rmse %.4f baseline %.4f\n", step, sessions, model_rmse(trainer, context, target, step),
               baseline_rmse(fine, coarse));
        fflush(stdout);
      }
      if (step == steps / 2 && steps >= 4 * EVERY) {
        /* The restart: the 48 steps just pushed trained synchronously, a checkpoint, a new trainer, the
         * checkpoint restored into it, the old one destroyed. */
        check(bellows_train(trainer, 0), "bellows_train");
        ++sessions;
        char path[4096];
        check(bellows_save(trainer, path, sizeof path), "bellows_save");
        bellows_trainer* restarted = NULL;
        check(bellows_create(argv[1], overrides, n, &restarted), "bellows_create (restart)");
        check(bellows_restore(restarted, path), "bellows_restore");
        check(bellows_destroy(trainer), "bellows_destroy");
        trainer = restarted;
        printf("sim_c: restarted at step %d from %s\n", step, path);
        continue;
      }
      check(bellows_train_async(trainer, 0), "bellows_train_async");
      running = 1;
    }
  }
  if (running) {
    check(bellows_wait(trainer), "bellows_wait");
    ++sessions;
    printf("eval step %d session %d rmse %.4f baseline %.4f\n", steps, sessions, model_rmse(trainer, context, target, steps),
           baseline_rmse(fine, coarse));
  }
  bellows_metrics m;
  check(bellows_metrics_get(trainer, &m), "bellows_metrics_get");
  printf("sim_c: %lld optimizer steps, %lld samples pushed, %lld dropped, last loss %.4f, %.0f samples/s\n", (long long)m.step,
         (long long)m.pushed, (long long)m.dropped, m.loss, m.samples_per_second);
  check(bellows_destroy(trainer), "bellows_destroy");
  return 0;
}
