// `bellows bench data`: how fast the configured data pipeline delivers batches, with no model in the way,
// for the configured settings and a small sweep of workers x prefetch depth. Per setting: ms per batch,
// batches/s, samples/s, bytes/s, time per stage (read, decode, transform, collate, copy), worker
// utilisation and the share of time the consumer waited. Seed 004's benchmark_dataloader, done properly.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "bellows/config/config.h"  // defines: Config
#include "bellows/data/pipeline_stats.h"  // defines: LoaderStats
#include "bellows/plan/plan.h"      // defines: Plan

namespace bellows::lab {

struct DataBenchOptions {
  std::int64_t batches = 50;                  // timed batches per setting
  std::int64_t warmup = 5;                    // batches before timing (queues fill, caches warm)
  bool sweep = true;
  std::vector<std::int64_t> sweep_workers;    // empty: 0, 1, 2, ... up to the usable cores (at most 4 values)
  std::vector<std::int64_t> sweep_prefetch;   // empty: 2, 4, 8
};

struct DataBenchRow {
  std::string label;         // "configured", "sweep"
  std::int64_t workers = 0;  // 0: synchronous
  std::int64_t prefetch = 0;
  data::LoaderStats stats;   // over the timed batches
  double ms_per_batch() const;
  double batches_per_second() const;
  double samples_per_second() const;
  double bytes_per_second() const;
  double worker_utilisation() const;  // busy time / (busy span x workers), at most 1 (LoaderStats); synchronous: 0
  double wait_fraction() const;       // share of the wall time the consumer waited for data
};

struct DataBenchReport {
  std::string dataset;
  std::string device;
  std::int64_t batch_size = 0;
  std::int64_t batches = 0;
  std::int64_t warmup = 0;
  std::vector<DataBenchRow> rows;  // rows[0]: the configured settings
  std::size_t best = 0;            // fastest row

  std::string table() const;       // for the terminal
  std::string to_json(int indent = 2) const;
};

DataBenchReport bench_data(const config::Config& config, const plan::Plan& plan, const DataBenchOptions& options);

}  // namespace bellows::lab
