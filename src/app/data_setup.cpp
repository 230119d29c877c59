// The run's loaders; see data_setup.h.
#include "bellows/app/data_setup.h"

#include <ATen/ATen.h>
#include <fmt/format.h>

#include <algorithm>
#include <chrono>

#include "bellows/app/run_settings.h"
#include "bellows/app/trainer_setup.h"  // defines: trainer_settings
#include "bellows/config/binding.h"  // defines: Binding
#include "bellows/data/resident.h"
#include "bellows/data/stager.h"
#include "bellows/hw/hardware_info.h"
#include "bellows/util/check.h"
#include "bellows/util/timer.h"  // defines: seconds_since

namespace bellows::app {
using config::Type;

namespace {

// The loader's data.* keys of data::LoaderOptions, bound once (config/binding.h); workers come from the plan
// (data.workers is the plan's key, run.cpp).
const config::Binding<data::LoaderOptions>& loader_binding() {
  using O = data::LoaderOptions;
  return config::bound<O>("data.", [](config::Binding<O>& b) {
    b.key("drop_last", &O::drop_last, "drop the last incomplete batch");
    b.key("prefetch", &O::prefetch, "batches loaded ahead of the training step (queue depth)").min(1);
    b.key("use_prefetch", &O::use_prefetch, "load in background workers (false: synchronous, for comparison)");
    b.key("pad_value", &O::pad_value, "padding of variable-length samples");
  });
}

// The sampler's data.* keys of data::SamplerOptions, bound once. data.sampler is read into `kind` as it is
// written, auto included (resolved by sampler_options, as dist.backend's auto is); the seed is the run's.
const config::Binding<data::SamplerOptions>& sampler_binding() {
  using O = data::SamplerOptions;
  return config::bound<O>("data.", [](config::Binding<O>& b) {
    // auto, not the struct's shuffle: the config's order follows data.shuffle unless it names a sampler.
    b.key("sampler", &O::kind, "sample order (auto: shuffle or sequential, after data.shuffle)")
        .choices({"auto", "sequential", "shuffle", "weighted"}).default_value(YAML::Node("auto"));
    b.key("num_samples", &O::num_samples, "weighted sampler: draws per epoch (0: dataset size)").min(0);
  });
}

// data.batch_size (a number, or auto: worked out by loaded_batch_size), data.shuffle (what sampler auto follows) and
// data.weights (a policy; the weights come from the labels) beside the loader's and the sampler's keys.
const config::Binding<LoaderSettings>& loader_settings_binding() {
  using L = LoaderSettings;
  return config::bound<L>("data.", [](config::Binding<L>& b) {
    b.custom("batch_size", Type::kInt, "samples per batch (per micro-batch); auto: batches of train.global_batch_size / ranks, run as the "
             "largest micro-batches that fit in memory (measured)",
             [](const config::Config& c, const std::string& key, L& o) {
               o.batch_auto = config::is_word(c, key, "auto");
               if (!o.batch_auto) o.batch_size = config::get_int(c, key);
             })
        .min(1).or_words({"auto"}).default_value(YAML::Node(L{}.batch_size));
    b.key("shuffle", &L::shuffle, "shuffle each epoch (seeded); sampler auto follows it");
    b.key("weights", &L::weights, "weighted sampler: balanced (inverse class frequency of the labels)").choices({"balanced"});
    b.nest(&L::sampler, sampler_binding());
    b.nest(&L::loader, loader_binding());
  });
}

}  // namespace

void add_loader_keys(config::Schema& s) { loader_settings_binding().declare(s); }

LoaderSettings loader_settings(const config::Config& c) { return loader_settings_binding().read(c); }

std::int64_t loaded_batch_size(const config::Config& c, int world_size) {
  const std::int64_t global = run_settings(c).global_batch_size;
  const std::int64_t accumulation = trainer_settings(c).accumulation_steps;
  if (const LoaderSettings settings = loader_settings(c); !settings.batch_auto) {
    const std::int64_t batch = settings.batch_size;
    BELLOWS_CHECK_CONFIG(global == 0 || global == batch * accumulation * world_size,
                         fmt::format("train.global_batch_size is {} ({}), but data.batch_size {} x train.accumulation_steps {} x {} rank(s) "
                                     "is {}", global, c.origin("train.global_batch_size").str(), batch, accumulation, world_size,
                                     batch * accumulation * world_size),
                         "make them agree, or set data.batch_size: auto to have the micro-batch found by measurement");
    return batch;
  }
  BELLOWS_CHECK_CONFIG(global > 0,
                       fmt::format("data.batch_size is auto ({}) but train.global_batch_size is not set", c.origin("data.batch_size").str()),
                       "set train.global_batch_size to the effective batch to keep (samples per optimizer step, over all ranks)");
  BELLOWS_CHECK_CONFIG(global % world_size == 0,
                       fmt::format("train.global_batch_size {} does not divide among {} ranks", global, world_size),
                       "make train.global_batch_size a multiple of the number of processes");
  BELLOWS_CHECK_CONFIG(accumulation == 1,
                       fmt::format("data.batch_size is auto, which sets the micro-batches per optimizer step, but train.accumulation_steps is {} ({})",
                                   accumulation, c.origin("train.accumulation_steps").str()),
                       "leave train.accumulation_steps at 1 with data.batch_size: auto, or set data.batch_size yourself");
  return global / world_size;
}

data::LoaderOptions loader_options(const config::Config& c, const plan::Plan& p, int world_size) {
  data::LoaderOptions o = loader_settings(c).loader;
  o.batch_size = loaded_batch_size(c, world_size);
  o.workers = p.workers;
  o.on_device = p.on_device == "true";
  return o;
}

data::SamplerOptions sampler_options(const config::Config& c, const data::Dataset& dataset) {
  const LoaderSettings settings = loader_settings(c);
  data::SamplerOptions o = settings.sampler;
  o.seed = static_cast<std::uint64_t>(run_settings(c).seed);
  if (o.kind == "auto") o.kind = settings.shuffle ? "shuffle" : "sequential";
  if (o.kind == "weighted") {
    const at::Tensor labels = dataset.class_labels();
    BELLOWS_CHECK_CONFIG(labels.defined(),
                         fmt::format("data.sampler is weighted ({}), but {} has no class labels to balance", c.origin("data.sampler").str(), dataset.name()),
                         "weighted sampling balances classes: use integer or categorical targets, or another sampler");
    const at::Tensor counts = at::bincount(labels).to(at::kDouble);
    const at::Tensor w = (1.0 / counts).index_select(0, labels).contiguous();
    o.weights.assign(w.data_ptr<double>(), w.data_ptr<double>() + w.numel());
  }
  return o;
}

double measure_batch_fetch_ms(const data::Dataset& dataset, std::int64_t batch_size) {
  batch_size = std::clamp<std::int64_t>(batch_size, 1, dataset.size());
  const std::int64_t batches = std::max<std::int64_t>(1, dataset.size() / batch_size);
  data::FetchContext context;
  std::vector<double> ms;
  for (std::int64_t trial = 0; trial < 4; ++trial) {  // the first one warms caches and is not counted
    const std::int64_t first = (trial * batches / 4) * batch_size;
    std::vector<std::int64_t> indices(static_cast<std::size_t>(batch_size));
    for (std::int64_t i = 0; i < batch_size; ++i) indices[static_cast<std::size_t>(i)] = std::min(first + i, dataset.size() - 1);
    const auto t0 = std::chrono::steady_clock::now();
    data::Batch batch = dataset.get_batch(indices, context);
    dataset.finish_on_device(batch);
    if (trial > 0) ms.push_back(1e3 * seconds_since(t0));
  }
  std::sort(ms.begin(), ms.end());
  return ms[ms.size() / 2];
}

Loaders make_loaders(const config::Config& c, const plan::Plan& planned, std::shared_ptr<data::StreamBuffer> stream, int rank,
                     int world_size, bool own_data) {
  Loaders l;
  l.splits = data::build_datasets(c, static_cast<std::uint64_t>(app::run_settings(c).seed), std::move(stream));
  // data.on_device: decided now that the data's bytes are known; data gathered on the device needs no workers.
  const std::vector<const data::Dataset*> datasets = {l.splits.train.get(), l.splits.val.get()};
  const double budget_gib = run_settings(c).memory_budget_gib;
  l.plan_rows.push_back(plan::plan_data_placement(
      planned, data::placement_bytes(datasets), data::unplaceable(datasets),
      budget_gib > 0 ? static_cast<std::int64_t>(budget_gib * double(1LL << 30)) : plan::device_free_bytes(hw::HardwareInfo::get(), planned)));
  if (l.plan_rows.back().value == "true") {
    l.plan_rows.push_back({"workers", "0", "data.on_device: batches are gathered on the device in the training thread"});
  } else if (planned.workers_planned && l.splits.train->size() > 0) {
    const double fetch_ms = measure_batch_fetch_ms(*l.splits.train, loaded_batch_size(c, world_size));
    if (auto row = plan::refine_workers(planned, hw::HardwareInfo::get(), fetch_ms)) l.plan_rows.push_back(std::move(*row));
  }
  plan::Plan p = planned;
  p.revise(l.plan_rows);
  const data::LoaderOptions lo = loader_options(c, p, world_size);
  // Data parallel: rank r takes positions r, r + W, ... of the epoch's order, so W ranks with batch B step on
  // the samples one process with batch W*B would (padded by wrap-around to equal shares, as DistributedSampler).
  data::SamplerOptions to = sampler_options(c, *l.splits.train);
  to.rank = own_data ? 0 : rank;
  to.world_size = own_data ? 1 : world_size;
  l.train = std::make_unique<data::Loader>(l.splits.train, data::Sampler(l.splits.train->size(), to), lo,
                                           data::make_stager(p.device, p.pin_memory));
  if (l.splits.val) {
    data::LoaderOptions vo = lo;
    vo.train = false;
    vo.drop_last = false;
    data::SamplerOptions so;
    so.kind = "sequential";
    so.rank = own_data ? 0 : rank;  // each rank evaluates its share once; the trainer adds the sums up over ranks
    so.world_size = own_data ? 1 : world_size;
    so.uneven = true;
    l.val = std::make_unique<data::Loader>(l.splits.val, data::Sampler(l.splits.val->size(), so), vo,
                                           data::make_stager(p.device, p.pin_memory));
  }
  return l;
}

}  // namespace bellows::app
