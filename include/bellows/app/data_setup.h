// The loaders of a run: the loader keys of the config's data block (batch size, sampler, workers, prefetch,
// pinning), and the datasets of the configured source (data/build.h) put behind samplers and prefetching
// loaders on the plan's device. `bellows train`, `cv` and `bench data` share this, so all read data the same way.
#pragma once

#include <memory>

#include "bellows/config/config.h"  // defines: Config
#include "bellows/config/schema.h"  // defines: Schema
#include "bellows/data/build.h"     // defines: DataSplits
#include "bellows/data/loader.h"    // defines: Loader, LoaderOptions
#include "bellows/plan/plan.h"      // defines: Plan

namespace bellows::data {
class StreamBuffer;
}

namespace bellows::app {

// data.batch_size, data.shuffle, data.sampler, data.weights, data.num_samples, data.drop_last, data.prefetch,
// data.use_prefetch, data.pad_value (data.workers and data.pin_memory are the plan's: app/run.h).
void add_loader_keys(config::Schema& schema);

// Those keys of a validated config (data.batch_size's check against the global batch: loaded_batch_size).
struct LoaderSettings {
  std::int64_t batch_size = 32;      // data.batch_size, when not auto
  bool batch_auto = false;           // data.batch_size: auto
  bool shuffle = true;               // data.shuffle
  std::string weights = "balanced";  // data.weights
  data::SamplerOptions sampler;      // data.sampler (auto as written), data.num_samples
  data::LoaderOptions loader;        // data.drop_last, data.prefetch, data.use_prefetch, data.pad_value (batch_size, workers: not set)
};
LoaderSettings loader_settings(const config::Config& config);


data::LoaderOptions loader_options(const config::Config& config, const plan::Plan& plan, int world_size = 1);

// Samples per loaded batch on each of `world_size` ranks: data.batch_size, or with data.batch_size: auto,
// train.global_batch_size / world_size (each loaded batch then runs as the micro-batches the finder chose:
// app::plan_micro_batch). kConfig errors when train.global_batch_size disagrees with data.batch_size x
// train.accumulation_steps x ranks, is missing or does not divide among the ranks under auto, or auto meets an
// accumulation other than 1.
std::int64_t loaded_batch_size(const config::Config& config, int world_size = 1);
// The sampler for `dataset` (weights from its labels for data.weights: balanced).
data::SamplerOptions sampler_options(const config::Config& config, const data::Dataset& dataset);

struct Loaders {
  data::DataSplits splits;
  std::unique_ptr<data::Loader> train;
  std::unique_ptr<data::Loader> val;  // null without validation data
  std::vector<plan::PlanEntry> plan_rows;  // what the data decided, for Plan::revise (planned workers, from a measured batch)
};

// The median time to fetch and finish one batch of `batch_size` samples in the calling thread (3 batches at
// spread-out positions, after one that warms caches). Reads the dataset, changes nothing.
double measure_batch_fetch_ms(const data::Dataset& dataset, std::int64_t batch_size);

// Datasets, samplers and loaders on the plan's device; evaluation loads in order, without augmentation.
// `stream`: the buffer a program pushes into (data.source: stream). With planned workers (data.workers: -1) the
// cost of a batch is measured and the workers revised (plan::refine_workers) before the loaders exist; the revised
// row is in plan_rows. `rank`/`world_size`: this process's share of the data in data-parallel training (dist/), its
// batch the global data.batch_size's share. `own_data`: every rank's data is its own (online training's ranks push
// their own samples): each loads all of it, at its share of the global batch, and evaluates all of its validation part.
Loaders make_loaders(const config::Config& config, const plan::Plan& plan, std::shared_ptr<data::StreamBuffer> stream = nullptr,
                     int rank = 0, int world_size = 1, bool own_data = false);

}  // namespace bellows::app
