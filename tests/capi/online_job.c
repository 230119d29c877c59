/* A job of training processes without MPI (bellows_create_job), as the GPU check runs it: each rank pushes its own
 * samples, trains a synchronous session and one in the background while it pushes on, predicts, saves and restores,
 * and prints one line of numbers. Its CPU twin runs in CTest (tests/CMakeLists.txt: capi.online_job, one rank under
 * dist.strategy: ddp over Gloo); scripts/gpu_check.sh runs it on a GPU over NCCL.
 *
 *   online_job DIR RANK SIZE PORT [key=value ...]     exit 0 when every call returned what it should
 */
#define _POSIX_C_SOURCE 200809L

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "bellows/bellows_c.h"

enum { kIn = 7, kOut = 256, kBlock = 512 };

static int failures = 0;

static int expect(int got, int want, const char* call) {
  if (got == want) return 1;
  fprintf(stderr, "FAILED: %s returned %d, expected %d: %s\n", call, got, want, bellows_last_error());
  ++failures;
  return 0;
}

static double seconds(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* A block of the coupled example's shape: 7 context values -> 256 values, a smooth function of them. */
static int push(bellows_trainer* t, int stream, int64_t first) {
  static float x[kBlock * kIn], y[kBlock * kOut];
  for (int64_t i = 0; i < kBlock; ++i) {
    for (int j = 0; j < kIn; ++j) x[i * kIn + j] = sinf(0.37f * (float)(stream * 100000 + first + i) + 0.9f * (float)j);
    for (int k = 0; k < kOut; ++k) y[i * kOut + k] = x[i * kIn + k % kIn] * cosf(0.1f * (float)k);
  }
  bellows_tensor ts[2] = {{"x", x, BELLOWS_FLOAT32, 2, {kBlock, kIn}}, {"y", y, BELLOWS_FLOAT32, 2, {kBlock, kOut}}};
  return bellows_push_block(t, ts, 2);
}

int main(int argc, char** argv) {
  if (argc < 5) {
    fprintf(stderr, "usage: online_job DIR RANK SIZE PORT [key=value ...]\n");
    return 2;
  }
  char yaml[2048], rendezvous[64];
  snprintf(yaml, sizeof yaml,
           "name: online-job\n"
           "seed: 0\n"
           "output_dir: %s/runs\n"
           "online: {console: none}\n"
           "data: {source: stream, stream: {capacity: 8192, ready_samples: %d}, batch_size: 128, val_fraction: 0.1}\n"
           "model: {name: ddpm, context_features: %d, out_features: %d, hidden: 256, layers: 2, steps: 50}\n"
           "train: {epochs: 4}\n"
           "schedule: {type: constant}\n"
           "ema: {enabled: true, decay: 0.99}\n"
           "dist: {timeout_s: 120}\n",
           argv[1], kBlock, kIn, kOut);
  snprintf(rendezvous, sizeof rendezvous, "127.0.0.1:%s", argv[4]);
  const bellows_job job = {atoi(argv[2]), atoi(argv[3]), atoi(argv[2]), atoi(argv[3]), rendezvous};
  bellows_trainer* t = NULL;
  if (!expect(bellows_create_job_from_string(yaml, (const char* const*)(argv + 5), argc - 5, &job, &t), BELLOWS_OK, "bellows_create_job"))
    return 1;
  expect(push(t, job.rank, 0), BELLOWS_OK, "push");
  double start = seconds();
  expect(bellows_train(t, 0), BELLOWS_OK, "bellows_train");
  const double first = seconds() - start;
  expect(push(t, job.rank, kBlock), BELLOWS_OK, "push");
  start = seconds();
  expect(bellows_train_async(t, 0), BELLOWS_OK, "bellows_train_async");
  double push_max = 0;
  for (int step = 0; step < 8; ++step) {  /* the simulation steps on while the session trains */
    const double before = seconds();
    expect(push(t, job.rank, 2 * kBlock + step * kBlock), BELLOWS_OK, "push during the session");
    push_max = fmax(push_max, seconds() - before);
  }
  expect(bellows_wait(t), BELLOWS_OK, "bellows_wait");
  const double second = seconds() - start;
  bellows_metrics m;
  expect(bellows_metrics_get(t, &m), BELLOWS_OK, "bellows_metrics_get");
  static float context[4 * kIn], out[4 * kOut];
  for (int i = 0; i < 4 * kIn; ++i) context[i] = cosf((float)i);
  bellows_tensor input = {NULL, context, BELLOWS_FLOAT32, 2, {4, kIn}};
  bellows_tensor output = {NULL, out, BELLOWS_FLOAT32, 0, {0}};
  bellows_predict_options options;
  bellows_predict_options_init(&options);
  options.steps = 10;
  expect(bellows_predict(t, &input, &output, 4 * kOut, &options), BELLOWS_OK, "bellows_predict");
  int finite = 1;
  for (int i = 0; i < 4 * kOut; ++i) finite = finite && isfinite(out[i]);
  if (!finite) {
    fprintf(stderr, "FAILED: the predictions are not finite\n");
    ++failures;
  }
  char path[4096];
  expect(bellows_save(t, path, sizeof path), BELLOWS_OK, "bellows_save");
  expect(bellows_restore(t, path), BELLOWS_OK, "bellows_restore");
  if (m.sessions != 2 || m.ranks != job.size || !isfinite(m.loss) || !isfinite(m.eval_loss)) {
    fprintf(stderr, "FAILED: metrics: sessions %lld, ranks %d, loss %g, eval loss %g\n", (long long)m.sessions, m.ranks, m.loss, m.eval_loss);
    ++failures;
  }
  printf("rank %d of %d: step %lld, loss %.4f, eval loss %.4f, %.0f samples/s; sessions %.2f s and %.2f s (background); "
         "the longest push while it trained %.0f us; checkpoint %s\n",
         m.rank, m.ranks, (long long)m.step, m.loss, m.eval_loss, m.samples_per_second, first, second, push_max * 1e6, path);
  expect(bellows_destroy(t), BELLOWS_OK, "bellows_destroy");
  printf("%d passed, %d failed\n", failures == 0 ? 1 : 0, failures == 0 ? 0 : 1);
  return failures == 0 ? 0 : 1;
}
