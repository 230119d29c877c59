// The Loader: a Dataset and a Sampler turned into a stream of batches on the training device.
//
//   sampler -> batches of indices -> [worker threads: read, decode, transform, collate, pin]
//           -> bounded reorder queue (at most `prefetch` batches loaded ahead, delivered in order)
//           -> [training thread: device copy one batch ahead, finish_on_device] -> Trainer
//
// Workers persist across epochs. A worker's exception (with the batch, its first samples and the dataset's
// own file/row context) is rethrown in the training thread by next(); the destructor stops and joins the
// workers however far the consumer got. `use_prefetch: false` (or workers 0) loads in the training thread:
// the synchronous path, for comparison and debugging. `on_device` keeps the dataset's tensors on the training
// device instead (data/resident.h): no workers, queue or stager; each batch is gathered there by a slice of the
// epoch's order, itself placed once per epoch. The position (epoch, batches delivered) is saveable, in the same
// form either way; a resumed loader yields exactly the batches that remained.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <exception>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <thread>
#include <vector>

#include "bellows/data/dataset.h"         // defines: Dataset
#include "bellows/data/pipeline_stats.h"  // defines: StageTimes, LoaderStats
#include "bellows/data/resident.h"        // defines: ResidentData
#include "bellows/data/sampler.h"  // defines: Sampler
#include "bellows/data/source.h"   // defines: BatchSource
#include "bellows/data/stager.h"   // defines: DeviceStager

namespace bellows::data {

struct LoaderOptions {
  std::int64_t batch_size = 32;
  bool drop_last = false;
  std::int64_t workers = 1;     // background loading threads (0: load in the training thread)
  std::int64_t prefetch = 4;    // batches loaded ahead of the training step (queue depth), >= 1
  bool use_prefetch = true;     // false: synchronous loading whatever `workers` says
  bool train = true;            // random augmentation on (evaluation: off)
  double pad_value = 0;         // variable-length samples (collate.h)
  bool on_device = false;       // gather batches from the dataset placed on the stager's device (data.on_device)
};

class Loader final : public BatchSource {
 public:
  // stager: null means the CPU twin on the CPU.
  Loader(std::shared_ptr<const Dataset> dataset, Sampler sampler, LoaderOptions options,
         std::unique_ptr<DeviceStager> stager = nullptr);
  ~Loader() override;
  Loader(const Loader&) = delete;
  Loader& operator=(const Loader&) = delete;

  void start_epoch(std::int64_t epoch) override;
  std::optional<Batch> next() override;
  std::int64_t batches_per_epoch() const override;
  std::int64_t remaining_in_epoch() const override;
  std::int64_t samples() const override { return sampler_.samples_per_epoch(); }
  StateDict state_dict() const override;  // epoch, position, batch_size, drop_last, sampler identity
  void load_state_dict(const StateDict& state) override;

  const Dataset& dataset() const { return *dataset_; }
  const LoaderOptions& options() const { return options_; }
  bool asynchronous() const { return async_; }
  LoaderStats stats() const;
  void reset_stats();

 private:
  struct Job {
    std::uint64_t generation;
    std::int64_t epoch;
    std::int64_t batch;  // index within the epoch
    std::vector<std::int64_t> indices;
    std::uint64_t seed;
  };
  struct Result {
    std::optional<Batch> batch;
    std::exception_ptr error;
    StageTimes times;
    double busy = 0;
    std::chrono::steady_clock::time_point started;  // when the worker began it
    std::int64_t bytes = 0;
  };

  std::vector<std::int64_t> batch_indices(std::int64_t batch) const;
  Result load(const Job& job) const;  // runs in a worker (or the training thread when synchronous)
  void worker_main();
  void submit_ahead();                // training thread: keep up to `prefetch` batches in the queue
  Result take(std::int64_t batch);    // training thread: wait for batch `batch` and take it (rethrows)
  void count(const Result& delivered);
  bool ready(std::int64_t batch);
  void stop_workers();
  Batch gather_resident();  // on_device: the batch at position_ from the placed dataset

  std::shared_ptr<const Dataset> dataset_;
  Sampler sampler_;
  LoaderOptions options_;
  std::unique_ptr<DeviceStager> stager_;
  std::shared_ptr<const ResidentData> resident_;  // on_device: the dataset on the device
  at::Tensor order_on_device_;                    // on_device: this epoch's order there
  std::optional<Result> staged_;  // the counters of the batch the stager holds (staged one ahead)
  bool async_ = false;

  // Training thread's view of the epoch.
  std::int64_t epoch_ = -1;
  std::int64_t position_ = 0;   // batches delivered in this epoch
  std::int64_t submitted_ = 0;  // batches handed to workers (async) in this epoch
  std::int64_t taken_ = 0;      // batches taken out of the queue (delivered, or staged one ahead)
  bool resumed_ = false;
  std::vector<std::int64_t> order_;  // this epoch's sample indices on this rank
  std::uint64_t epoch_seed_ = 0;

  // Shared with the workers (guarded by mutex_).
  mutable std::mutex mutex_;
  std::condition_variable jobs_cv_, done_cv_;
  std::deque<Job> jobs_;
  std::map<std::int64_t, Result> done_;
  std::uint64_t generation_ = 0;
  bool stopping_ = false;
  std::int64_t queue_bytes_ = 0;
  std::int64_t queue_peak_ = 0;
  std::vector<std::thread> workers_;

  LoaderStats stats_;
  std::optional<std::chrono::steady_clock::time_point> stats_start_;
  // The earliest start of work among the batches counted since reset_stats(), and the last delivery: every
  // counted busy second lies between them (LoaderStats::busy_span_seconds).
  std::optional<std::chrono::steady_clock::time_point> first_work_, last_delivery_;
};

}  // namespace bellows::data
