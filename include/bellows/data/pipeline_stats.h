// The data pipeline's counters: time per stage of producing a batch, and a loader's totals. Kept apart from
// the Dataset and Loader classes so that reports (a run's result, `bellows bench data`) need no tensor headers.
#pragma once

#include <cstdint>

namespace bellows::data {

// Seconds spent in each stage of producing a batch; `bellows bench data` reports them.
struct StageTimes {
  double read = 0;       // bytes from storage: file reads, page faults of memory maps, gathers
  double decode = 0;     // PNG/JPEG/text to numbers
  double transform = 0;  // resize, crop, flip, normalise, windowing
  double collate = 0;    // samples to one batch: stack, pad
  double copy = 0;       // host to device (and pinning)

  StageTimes& operator+=(const StageTimes& o);
  double total() const { return read + decode + transform + collate + copy; }
};

// Counters since construction or reset_stats(); `bench data` and the doctor read them.
struct LoaderStats {
  std::int64_t batches = 0;
  std::int64_t samples = 0;
  std::int64_t bytes = 0;              // bytes of the delivered (host) batches
  StageTimes stages;                   // summed over workers; copy is the training thread's staging time
  double worker_busy_seconds = 0;      // summed over workers
  double wait_seconds = 0;             // the training thread blocked in next() waiting for a batch
  double wall_seconds = 0;             // since the first next() after construction or reset_stats()
  // From the start of the earliest work on a counted batch (a batch delivered after reset_stats() may have been
  // loaded before it) to the last delivery: the window that holds all of worker_busy_seconds, so
  // worker_busy_seconds <= busy_span_seconds x workers.
  double busy_span_seconds = 0;
  std::int64_t workers = 0;            // 0: synchronous
  bool on_device = false;              // gathered from the data placed on the device (no workers, no copy)
  std::int64_t prefetch = 0;
  std::int64_t queue_bytes_peak = 0;   // most bytes held by loaded-but-undelivered batches at once
  std::int64_t queued = 0;             // batches loaded and not yet taken by the training thread, now
};

}  // namespace bellows::data
