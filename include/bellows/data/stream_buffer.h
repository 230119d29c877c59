// An in-memory buffer that an application pushes samples into while it runs (seed 002: a climate simulation
// trains its downscaling model on the fields it has just produced). Pushes are thread-safe and bounded:
// when full, the oldest samples are dropped (a sliding window of recent data), the pusher blocks until a
// consumer makes room, or the push fails, as configured. A "ready" trigger says when enough samples have
// arrived for a training session; take() freezes the current contents into a TensorDataset that a Loader
// trains on while the application keeps pushing.
#pragma once

#include <ATen/core/Tensor.h>

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>

#include "bellows/data/dataset.h"         // defines: Example
#include "bellows/data/tensor_dataset.h"  // defines: TensorDataset

namespace bellows::config {
class Config;
}

namespace bellows::data {

struct StreamBufferOptions {
  std::int64_t capacity = 65536;       // samples held at most
  std::string when_full = "drop_oldest";  // drop_oldest | block | error
  std::int64_t ready_samples = 0;      // samples that make the buffer ready for a session (0: capacity)
  // Read by those who use the buffer, not by the buffer itself:
  bool clear = true;         // a session's take() empties the buffer (the stream source)
  bool check_finite = true;  // pushes refuse samples with NaN or Inf values (the online trainer's check)
};

class StreamBuffer {
 public:
  explicit StreamBuffer(StreamBufferOptions options);

  // One sample (tensors without a batch dimension). The first push fixes the names, shapes and dtypes;
  // later pushes must match (kData error naming the tensor and both shapes). Values are copied.
  void push(const Example& sample);
  // Many samples at once: tensors with a leading sample dimension of equal length.
  void push_many(const std::map<std::string, at::Tensor>& samples);

  std::int64_t size() const;            // samples held now
  std::int64_t pushed() const;          // samples pushed in total
  std::int64_t dropped() const;         // samples overwritten (drop_oldest) before anyone took them
  bool ready() const;                   // size() >= ready_samples
  // Blocks until ready() or close(), at most `timeout`; returns ready().
  bool wait_ready(std::chrono::milliseconds timeout);
  void close();                         // the producer is done: wakes waiters
  bool closed() const;

  // The samples held now, oldest first, as a dataset of their own (copies). clear: empty the buffer too,
  // so the next session trains only on new samples. kData error when the buffer is empty. `limit` >= 0: the
  // oldest `limit` samples only (all when it holds fewer); clear then removes just those, and the newer ones wait
  // for the next session (the ranks of a job take equal shares: app/online.h).
  std::shared_ptr<TensorDataset> take(bool clear = true, std::string name = "stream buffer", std::int64_t limit = -1);

 private:
  void push_locked(std::unique_lock<std::mutex>& lock, const std::map<std::string, at::Tensor>& samples, std::int64_t row);

  StreamBufferOptions options_;
  mutable std::mutex mutex_;
  std::condition_variable ready_cv_, space_cv_;
  std::map<std::string, at::Tensor> storage_;  // name -> [capacity, ...]
  std::int64_t head_ = 0;                      // next slot to write
  std::int64_t count_ = 0;
  std::int64_t pushed_ = 0;
  std::int64_t dropped_ = 0;
  bool closed_ = false;
};

// The buffer's options from a validated run config's data.stream.* keys (data.source: stream), read through the
// stream source's binding (src/data/sources/stream.cpp).
StreamBufferOptions stream_buffer_options(const config::Config& config);

}  // namespace bellows::data
