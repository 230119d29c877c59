// The prefetching loader; see loader.h.
#include "bellows/data/loader.h"

#include <ATen/ATen.h>
#include <c10/util/ParallelGuard.h>
#include <fmt/format.h>

#include <algorithm>
#include <chrono>

#include "bellows/util/check.h"
#include "bellows/util/exception_report.h"
#include "bellows/util/timer.h"  // defines: seconds_since

namespace bellows::data {

namespace {

using Clock = std::chrono::steady_clock;

std::int64_t batch_bytes(const Batch& b) {
  std::int64_t n = 0;
  for (const auto& [name, t] : b.tensors) n += static_cast<std::int64_t>(t.nbytes());
  return n;
}

}  // namespace

Loader::Loader(std::shared_ptr<const Dataset> dataset, Sampler sampler, LoaderOptions options,
               std::unique_ptr<DeviceStager> stager)
    : dataset_(std::move(dataset)), sampler_(std::move(sampler)), options_(options), stager_(std::move(stager)) {
  BELLOWS_CHECK(dataset_ != nullptr, "Loader without a dataset", "report this bug");
  BELLOWS_CHECK_CONFIG(options_.batch_size >= 1, fmt::format("batch_size is {}, expected >= 1", options_.batch_size),
                       "set data.batch_size to a positive integer");
  BELLOWS_CHECK_CONFIG(options_.workers >= 0, fmt::format("workers is {}, expected >= 0", options_.workers),
                       "set data.workers to 0 (load in the training thread) or more");
  BELLOWS_CHECK_CONFIG(options_.prefetch >= 1, fmt::format("prefetch is {}, expected >= 1", options_.prefetch),
                       "set data.prefetch to the number of batches to load ahead (>= 1)");
  BELLOWS_CHECK_DATA(sampler_.dataset_size() == dataset_->size(),
                     fmt::format("the sampler covers {} samples, {} has {}", sampler_.dataset_size(), dataset_->name(),
                                 dataset_->size()),
                     "build the sampler for this dataset");
  if (!stager_) stager_ = make_cpu_stager();
  if (options_.on_device) {
    resident_ = dataset_->place(stager_->device());
    BELLOWS_CHECK_CONFIG(resident_ != nullptr,
                         fmt::format("data.on_device is true, but {} is read and decoded per sample, not held as tensors", dataset_->name()),
                         "set data.on_device: auto (or false): images and NetCDF slices load through the prefetching loader");
  }
  async_ = !resident_ && options_.use_prefetch && options_.workers > 0;
  stats_.on_device = resident_ != nullptr;
  stats_.workers = async_ ? options_.workers : 0;
  stats_.prefetch = async_ ? options_.prefetch : 0;
  if (async_) {
    workers_.reserve(static_cast<std::size_t>(options_.workers));
    for (std::int64_t i = 0; i < options_.workers; ++i) workers_.emplace_back([this] { worker_main(); });
  }
}

Loader::~Loader() { stop_workers(); }

void Loader::stop_workers() {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
    jobs_.clear();
  }
  jobs_cv_.notify_all();
  done_cv_.notify_all();
  for (auto& w : workers_) {
    if (w.joinable()) w.join();
  }
  workers_.clear();
}

std::int64_t Loader::batches_per_epoch() const {
  const std::int64_t n = sampler_.samples_per_epoch();
  const std::int64_t b = options_.batch_size;
  return options_.drop_last ? n / b : (n + b - 1) / b;
}

std::int64_t Loader::remaining_in_epoch() const { return std::max<std::int64_t>(0, batches_per_epoch() - position_); }

std::vector<std::int64_t> Loader::batch_indices(std::int64_t batch) const {
  const auto begin = static_cast<std::size_t>(batch * options_.batch_size);
  const auto end = std::min(order_.size(), begin + static_cast<std::size_t>(options_.batch_size));
  return {order_.begin() + static_cast<std::ptrdiff_t>(begin), order_.begin() + static_cast<std::ptrdiff_t>(end)};
}

void Loader::start_epoch(std::int64_t epoch) {
  if (!(resumed_ && epoch == epoch_)) position_ = 0;
  resumed_ = false;
  epoch_ = epoch;
  order_ = sampler_.indices(epoch);
  // Augmentation draws: a stream per epoch, independent of the shuffling stream.
  epoch_seed_ = mix_seed(mix_seed(sampler_.options().seed, 0xA11CE), static_cast<std::uint64_t>(epoch));
  // One small copy per epoch: the batches' indices are slices of it, on the device.
  if (resident_) order_on_device_ = at::tensor(order_, at::kLong).to(stager_->device());
  if (stager_->pending()) stager_->finish();  // a batch staged ahead for an abandoned epoch
  staged_.reset();
  {
    std::lock_guard lock(mutex_);
    ++generation_;
    jobs_.clear();
    done_.clear();
    queue_bytes_ = 0;
  }
  submitted_ = taken_ = position_;
  if (async_) submit_ahead();
}

Loader::Result Loader::load(const Job& job) const {
  const auto start = Clock::now();
  Result r;
  r.started = start;
  try {
    FetchContext context;
    context.seed = job.seed;
    context.train = options_.train;
    context.pad_value = options_.pad_value;
    Batch batch = dataset_->get_batch(job.indices, context);
    const auto pin_start = Clock::now();
    stager_->prepare_host(batch);
    context.times.copy += seconds_since(pin_start);
    r.bytes = batch_bytes(batch);
    r.times = context.times;
    r.batch = std::move(batch);
  } catch (...) {
    // The worker's error, with where it happened; its kind as the CLI would see it (out of memory stays a
    // resource error: util/exception_report.h).
    const ExceptionReport e = report_current_exception();
    const std::string where =
        fmt::format("loading batch {} of epoch {} ({} samples, the first {})", job.batch, job.epoch, job.indices.size(),
                    job.indices.empty() ? std::string("none") : dataset_->describe(job.indices.front()));
    const bool ours = !e.location.empty();
    r.error = std::make_exception_ptr(Error(e.kind, fmt::format("{}; while {}", e.message.empty() ? "out of memory" : e.message, where),
                                            ours || !e.hint.empty() ? e.hint
                                                                    : "the dataset raised an unexpected error; run with data.workers=0 to debug in one thread"));
  }
  r.busy = seconds_since(start);
  return r;
}

void Loader::worker_main() {
  // Each worker runs ATen ops single-threaded: parallelism comes from the workers, and the intra-op pool
  // belongs to the training step.
  c10::ParallelGuard serial(true);
  for (;;) {
    Job job;
    {
      std::unique_lock lock(mutex_);
      jobs_cv_.wait(lock, [&] { return stopping_ || !jobs_.empty(); });
      if (stopping_) return;
      job = std::move(jobs_.front());
      jobs_.pop_front();
    }
    Result r = load(job);
    {
      std::lock_guard lock(mutex_);
      if (stopping_ || job.generation != generation_) continue;  // an abandoned epoch's batch
      queue_bytes_ += r.bytes;
      queue_peak_ = std::max(queue_peak_, queue_bytes_);
      done_.emplace(job.batch, std::move(r));
    }
    done_cv_.notify_all();
  }
}

void Loader::submit_ahead() {
  const std::int64_t total = batches_per_epoch();
  std::int64_t added = 0;
  {
    std::lock_guard lock(mutex_);
    while (submitted_ < total && submitted_ - taken_ < options_.prefetch) {
      jobs_.push_back(Job{generation_, epoch_, submitted_, batch_indices(submitted_), epoch_seed_});
      ++submitted_;
      ++added;
    }
  }
  if (added == 1) jobs_cv_.notify_one();
  if (added > 1) jobs_cv_.notify_all();
}

bool Loader::ready(std::int64_t batch) {
  std::lock_guard lock(mutex_);
  const auto it = done_.find(batch);
  // A failed batch is not staged ahead: its error surfaces when the training step asks for that batch.
  return it != done_.end() && !it->second.error;
}

Loader::Result Loader::take(std::int64_t batch) {
  Result r;
  if (!async_) {
    r = load(Job{generation_, epoch_, batch, batch_indices(batch), epoch_seed_});
    stats_.wait_seconds += r.busy;  // the training thread did the loading itself
  } else {
    submit_ahead();
    const auto start = Clock::now();
    {
      std::unique_lock lock(mutex_);
      done_cv_.wait(lock, [&] { return stopping_ || done_.count(batch) > 0; });
      BELLOWS_CHECK(!stopping_, "the loader was stopped while the training thread waited for a batch", "report this bug");
      auto it = done_.find(batch);
      r = std::move(it->second);
      done_.erase(it);
      queue_bytes_ -= r.bytes;
    }
    stats_.wait_seconds += seconds_since(start);
  }
  ++taken_;
  if (async_) submit_ahead();
  if (r.error) std::rethrow_exception(r.error);
  return r;
}

// Counted when the batch is delivered, not when it is taken from the queue (a staged batch is taken one
// step early), so stats cover exactly the batches next() returned since reset_stats().
void Loader::count(const Result& r) {
  stats_.batches += 1;
  stats_.samples += r.batch ? r.batch->size : 0;
  stats_.bytes += r.bytes;
  stats_.stages += r.times;
  stats_.worker_busy_seconds += r.busy;
  if (!first_work_ || r.started < *first_work_) first_work_ = r.started;
  last_delivery_ = Clock::now();
}

std::optional<Batch> Loader::next() {
  BELLOWS_CHECK(epoch_ >= 0, "Loader::next() before start_epoch()", "call start_epoch(epoch) first");
  if (!stats_start_) stats_start_ = Clock::now();
  const std::int64_t total = batches_per_epoch();
  if (position_ >= total) return std::nullopt;
  if (resident_) return gather_resident();
  auto stage = [&](std::int64_t k) {
    Result r = take(k);
    const auto start = Clock::now();
    stager_->begin(std::move(*r.batch));
    r.batch.reset();
    r.times.copy += seconds_since(start);
    staged_ = std::move(r);
  };
  if (!stager_->pending()) stage(position_);
  auto start = Clock::now();
  Batch batch = stager_->finish();
  staged_->times.copy += seconds_since(start);
  staged_->batch = Batch{.tensors = {}, .size = batch.size};
  count(*staged_);
  staged_.reset();
  ++position_;
  // Start the next batch's copy now if it is already loaded, so that it overlaps this step's compute.
  if (async_ && position_ < total && ready(position_)) stage(position_);
  start = Clock::now();
  dataset_->finish_on_device(batch);
  stats_.stages.transform += seconds_since(start);
  return batch;
}

Batch Loader::gather_resident() {
  const auto start = Clock::now();
  const std::int64_t first = position_ * options_.batch_size;
  const std::int64_t count = std::min<std::int64_t>(options_.batch_size, static_cast<std::int64_t>(order_.size()) - first);
  Batch batch = resident_->gather(order_on_device_.narrow(0, first, count));
  dataset_->finish_on_device(batch);
  const double seconds = seconds_since(start);  // launch time on a GPU: the gathers run on the compute stream
  stats_.stages.read += seconds;
  stats_.wait_seconds += seconds;
  stats_.batches += 1;
  stats_.samples += count;
  if (!first_work_) first_work_ = start;
  last_delivery_ = Clock::now();
  ++position_;
  return batch;
}

StateDict Loader::state_dict() const {
  StateDict s;
  put_int(s, "epoch", epoch_);
  put_int(s, "position", position_);
  put_int(s, "batch_size", options_.batch_size);
  put_int(s, "drop_last", options_.drop_last ? 1 : 0);
  merge_prefixed(s, "sampler", sampler_.state_dict());
  return s;
}

void Loader::load_state_dict(const StateDict& state) {
  BELLOWS_CHECK_DATA(get_int(state, "drop_last") == (options_.drop_last ? 1 : 0),
                     fmt::format("the saved data position used drop_last {}, this run has {}", get_int(state, "drop_last") != 0,
                                 options_.drop_last),
                     "resume with the same data.drop_last, or start a new run");
  sampler_.check_compatible(sub_dict(state, "sampler"));
  epoch_ = get_int(state, "epoch");
  position_ = get_int(state, "position");
  // Saved by a job of another size or per-rank batch: the ranks had consumed position x batch x world positions of
  // the epoch's order (rank r takes positions r, r + world, ...), which become this job's batches. With the same global
  // batch the next batch is the one the saved job would have taken; otherwise the position rounds down to a whole
  // batch of this job (a few samples are seen again).
  const std::int64_t saved_world = get_int(sub_dict(state, "sampler"), "world_size"), saved_batch = get_int(state, "batch_size");
  const std::int64_t world = sampler_.options().world_size;
  if (saved_world != world || saved_batch != options_.batch_size) {
    position_ = position_ * saved_batch * saved_world / (options_.batch_size * world);
    position_ = std::min(position_, batches_per_epoch());
  }
  resumed_ = true;
}

LoaderStats Loader::stats() const {
  LoaderStats s = stats_;
  s.wall_seconds = stats_start_ ? seconds_since(*stats_start_) : 0;
  s.busy_span_seconds = first_work_ && last_delivery_ ? std::chrono::duration<double>(*last_delivery_ - *first_work_).count() : 0;
  std::lock_guard lock(mutex_);
  s.queue_bytes_peak = queue_peak_;
  s.queued = static_cast<std::int64_t>(done_.size());
  return s;
}

void Loader::reset_stats() {
  LoaderStats fresh;  // the counters at zero; what the loader is, kept
  fresh.workers = stats_.workers;
  fresh.on_device = stats_.on_device;
  fresh.prefetch = stats_.prefetch;
  stats_ = fresh;
  stats_start_.reset();
  first_work_.reset();
  last_delivery_.reset();
  std::lock_guard lock(mutex_);
  queue_peak_ = queue_bytes_;
}

}  // namespace bellows::data
