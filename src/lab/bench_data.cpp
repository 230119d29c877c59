// The data pipeline benchmark; see bench_data.h.
#include "bellows/lab/bench_data.h"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <set>

#include "bellows/data/stager.h"
#include "bellows/app/data_setup.h"
#include "bellows/app/run_settings.h"  // defines: run_settings (the seed)
#include "bellows/data/build.h"
#include "bellows/util/check.h"

namespace bellows::lab {

double DataBenchRow::ms_per_batch() const { return stats.batches ? 1e3 * stats.wall_seconds / stats.batches : 0; }
double DataBenchRow::batches_per_second() const { return stats.wall_seconds > 0 ? stats.batches / stats.wall_seconds : 0; }
double DataBenchRow::samples_per_second() const { return stats.wall_seconds > 0 ? stats.samples / stats.wall_seconds : 0; }
double DataBenchRow::bytes_per_second() const { return stats.wall_seconds > 0 ? stats.bytes / stats.wall_seconds : 0; }
double DataBenchRow::worker_utilisation() const {
  return workers > 0 && stats.busy_span_seconds > 0 ? stats.worker_busy_seconds / (stats.busy_span_seconds * workers) : 0;
}
double DataBenchRow::wait_fraction() const { return stats.wall_seconds > 0 ? stats.wait_seconds / stats.wall_seconds : 0; }

namespace {

// Runs `warmup` then `batches` batches through a fresh loader, across epoch ends, and returns the stats of
// the timed part.
data::LoaderStats measure(const std::shared_ptr<const data::Dataset>& dataset, const data::SamplerOptions& sampler,
                          const data::LoaderOptions& options, const plan::Plan& plan, std::int64_t warmup, std::int64_t batches) {
  data::Loader loader(dataset, data::Sampler(dataset->size(), sampler), options, data::make_stager(plan.device, plan.pin_memory));
  std::int64_t epoch = 0;
  loader.start_epoch(epoch);
  data::Batch last;
  auto pull = [&] {
    auto b = loader.next();
    if (!b) {
      loader.start_epoch(++epoch);
      b = loader.next();
    }
    BELLOWS_CHECK_DATA(b.has_value(), fmt::format("{} produced no batch", dataset->name()), "check the data and batch size");
    last = std::move(*b);
  };
  for (std::int64_t i = 0; i < warmup; ++i) pull();
  loader.reset_stats();
  for (std::int64_t i = 0; i < batches; ++i) pull();
  // Device copies are asynchronous: reading one value back waits for the last one.
  if (!last.tensors.empty() && !last.tensors.begin()->second.is_cpu()) last.tensors.begin()->second.sum().item();
  return loader.stats();
}

std::string bytes_text(double b) {
  if (b >= 1e9) return fmt::format("{:.2f} GB", b / 1e9);
  if (b >= 1e6) return fmt::format("{:.1f} MB", b / 1e6);
  return fmt::format("{:.1f} kB", b / 1e3);
}

}  // namespace

DataBenchReport bench_data(const config::Config& c, const plan::Plan& plan, const DataBenchOptions& o) {
  BELLOWS_CHECK_USAGE(o.batches >= 1 && o.warmup >= 0, fmt::format("--batches {} --warmup {}", o.batches, o.warmup),
                      "time at least one batch; warm-up may be 0");
  const data::DataSplits splits = data::build_datasets(c, static_cast<std::uint64_t>(app::run_settings(c).seed));
  const data::SamplerOptions sampler = app::sampler_options(c, *splits.train);
  const data::LoaderOptions configured = app::loader_options(c, plan);

  DataBenchReport r;
  r.dataset = splits.train->name();
  r.device = plan.device.str();
  r.batch_size = configured.batch_size;
  r.batches = o.batches;
  r.warmup = o.warmup;

  auto run = [&](const std::string& label, data::LoaderOptions lo) {
    DataBenchRow row;
    row.label = label;
    row.workers = lo.use_prefetch ? lo.workers : 0;
    row.prefetch = row.workers > 0 ? lo.prefetch : 0;
    row.stats = measure(splits.train, sampler, lo, plan, o.warmup, o.batches);
    r.rows.push_back(row);
  };
  run("configured", configured);
  if (o.sweep) {
    std::vector<std::int64_t> workers = o.sweep_workers;
    if (workers.empty()) {
      const std::int64_t cores = std::max(1, plan.threads);
      for (std::int64_t w : {std::int64_t{0}, std::int64_t{1}, std::int64_t{2}, cores}) {
        if (w <= std::max<std::int64_t>(2, cores)) workers.push_back(w);
      }
    }
    std::vector<std::int64_t> prefetch = o.sweep_prefetch.empty() ? std::vector<std::int64_t>{2, 4, 8} : o.sweep_prefetch;
    std::set<std::pair<std::int64_t, std::int64_t>> done{{r.rows[0].workers, r.rows[0].prefetch}};
    for (const std::int64_t w : std::set<std::int64_t>(workers.begin(), workers.end())) {
      for (const std::int64_t p : prefetch) {
        const std::int64_t eff_p = w > 0 ? p : 0;
        if (!done.insert({w, eff_p}).second) continue;
        data::LoaderOptions lo = configured;
        lo.workers = w;
        lo.prefetch = std::max<std::int64_t>(1, p);
        lo.use_prefetch = w > 0;
        run("sweep", lo);
      }
    }
  }
  for (std::size_t i = 1; i < r.rows.size(); ++i) {
    if (r.rows[i].batches_per_second() > r.rows[r.best].batches_per_second()) r.best = i;
  }
  return r;
}

std::string DataBenchReport::table() const {
  std::string out = fmt::format("bench data: {}\n  batch {} on {}; {} timed batches per setting after {} warm-up\n", dataset,
                                batch_size, device, batches, warmup);
  out += fmt::format("  {:<11} {:>7} {:>8} {:>9} {:>9} {:>10} {:>10} | {:>6} {:>6} {:>6} {:>6} {:>6} | {:>5} {:>5} {:>9}\n", "setting",
                     "workers", "prefetch", "ms/batch", "batches/s", "samples/s", "bytes/s", "read", "decode", "transf", "collat",
                     "copy", "util", "wait", "queue max");
  out += fmt::format("  {:<11} {:>7} {:>8} {:>9} {:>9} {:>10} {:>10} | {:^34} | {:>5} {:>5} {:>9}\n", "", "", "", "", "", "", "",
                     "stage ms per batch (worker time)", "", "", "");
  for (std::size_t i = 0; i < rows.size(); ++i) {
    const auto& row = rows[i];
    const double n = std::max<double>(1, row.stats.batches);
    const auto& st = row.stats.stages;
    out += fmt::format("{} {:<11} {:>7} {:>8} {:>9.2f} {:>9.1f} {:>10.0f} {:>10} | {:>6.2f} {:>6.2f} {:>6.2f} {:>6.2f} {:>6.2f} | {:>4.0f}% {:>4.0f}% {:>9}\n",
                       i == best ? "*" : " ", row.label, row.workers == 0 ? std::string("sync") : std::to_string(row.workers),
                       row.workers == 0 ? std::string("-") : std::to_string(row.prefetch), row.ms_per_batch(), row.batches_per_second(),
                       row.samples_per_second(), bytes_text(row.bytes_per_second()) + "/s", 1e3 * st.read / n, 1e3 * st.decode / n,
                       1e3 * st.transform / n, 1e3 * st.collate / n, 1e3 * st.copy / n, 100 * row.worker_utilisation(),
                       100 * row.wait_fraction(), bytes_text(static_cast<double>(row.stats.queue_bytes_peak)));
  }
  const auto& b = rows[best];
  out += fmt::format("  fastest (*): {}; {:.2f}x the configured setting. Set data.workers={} data.prefetch={}{}\n",
                     b.workers == 0 ? std::string("synchronous loading") : fmt::format("{} workers, prefetch {}", b.workers, b.prefetch),
                     rows[0].batches_per_second() > 0 ? b.batches_per_second() / rows[0].batches_per_second() : 0.0, b.workers,
                     std::max<std::int64_t>(b.prefetch, 1), b.workers == 0 ? " (or data.use_prefetch=false)" : "");
  out += "  Stage times are summed over workers; util = the timed batches' worker busy time / (workers x the span from the start\n"
         "  of their earliest work to the last delivery; prefetched batches were begun before the timed part); wait = share of the wall time\n"
         "  the consumer waited for a batch. Without a model the loader runs flat out; in training it competes with compute.\n";
  return out;
}

std::string DataBenchReport::to_json(int indent) const {
  nlohmann::json j;
  j["dataset"] = dataset;
  j["device"] = device;
  j["batch_size"] = batch_size;
  j["batches"] = batches;
  j["warmup"] = warmup;
  j["best"] = best;
  nlohmann::json rows_json = nlohmann::json::array();
  for (const auto& row : rows) {
    const auto& s = row.stats;
    const double n = std::max<double>(1, s.batches);
    rows_json.push_back({{"label", row.label},
                         {"workers", row.workers},
                         {"prefetch", row.prefetch},
                         {"synchronous", row.workers == 0},
                         {"batches", s.batches},
                         {"samples", s.samples},
                         {"bytes", s.bytes},
                         {"seconds", s.wall_seconds},
                         {"ms_per_batch", row.ms_per_batch()},
                         {"batches_per_second", row.batches_per_second()},
                         {"samples_per_second", row.samples_per_second()},
                         {"bytes_per_second", row.bytes_per_second()},
                         {"stage_ms_per_batch",
                          {{"read", 1e3 * s.stages.read / n},
                           {"decode", 1e3 * s.stages.decode / n},
                           {"transform", 1e3 * s.stages.transform / n},
                           {"collate", 1e3 * s.stages.collate / n},
                           {"copy", 1e3 * s.stages.copy / n}}},
                         {"worker_utilisation", row.worker_utilisation()},
                         {"wait_fraction", row.wait_fraction()},
                         {"queue_bytes_peak", s.queue_bytes_peak}});
  }
  j["rows"] = rows_json;
  return j.dump(indent) + "\n";
}

}  // namespace bellows::lab
