// The stream buffer; see stream_buffer.h.
#include "bellows/data/stream_buffer.h"

#include <ATen/ATen.h>
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>

#include "bellows/util/check.h"
#include "bellows/util/format.h"  // defines: shape_of

namespace bellows::data {

StreamBuffer::StreamBuffer(StreamBufferOptions options) : options_(std::move(options)) {
  BELLOWS_CHECK_CONFIG(options_.capacity >= 1, fmt::format("stream buffer capacity is {}, expected >= 1", options_.capacity),
                       "give the buffer room for at least one sample");
  BELLOWS_CHECK_CONFIG(options_.when_full == "drop_oldest" || options_.when_full == "block" || options_.when_full == "error",
                       fmt::format("stream buffer when_full '{}' is not known", options_.when_full),
                       "use drop_oldest, block or error");
  BELLOWS_CHECK_CONFIG(options_.ready_samples >= 0 && options_.ready_samples <= options_.capacity,
                       fmt::format("ready_samples {} is outside [0, capacity {}]", options_.ready_samples, options_.capacity),
                       "trigger a session at most when the buffer is full");
  if (options_.ready_samples == 0) options_.ready_samples = options_.capacity;
}

void StreamBuffer::push(const Example& sample) {
  std::map<std::string, at::Tensor> one;
  for (const auto& [name, t] : sample) one.emplace(name, t.unsqueeze(0));
  push_many(one);
}

void StreamBuffer::push_many(const std::map<std::string, at::Tensor>& samples) {
  BELLOWS_CHECK_DATA(!samples.empty(), "stream buffer push of no tensors", "push named tensors, e.g. {\"x\": ..., \"y\": ...}");
  const std::int64_t n = samples.begin()->second.dim() ? samples.begin()->second.size(0) : 0;
  for (const auto& [name, t] : samples) {
    BELLOWS_CHECK_DATA(t.dim() >= 1 && t.size(0) == n,
                       fmt::format("stream buffer push: tensor '{}' has {} samples, '{}' has {}", name, t.dim() ? t.size(0) : 0,
                                   samples.begin()->first, n),
                       "push the same number of samples for every tensor");
  }
  std::unique_lock lock(mutex_);
  BELLOWS_CHECK_DATA(!closed_, "push to a closed stream buffer", "push before close()");
  if (storage_.empty()) {
    for (const auto& [name, t] : samples) {
      std::vector<std::int64_t> shape{options_.capacity};
      for (std::int64_t d = 1; d < t.dim(); ++d) shape.push_back(t.size(d));
      storage_.emplace(name, at::empty(shape, t.options().device(at::kCPU)));
    }
  }
  for (const auto& [name, slot] : storage_) {
    auto it = samples.find(name);
    BELLOWS_CHECK_DATA(it != samples.end() && samples.size() == storage_.size(),
                       fmt::format("stream buffer push lacks tensor '{}' (or has extra ones) that the first push had", name),
                       "push the same named tensors every time");
    const at::Tensor& t = it->second;
    BELLOWS_CHECK_DATA(t.sizes().slice(1) == slot.sizes().slice(1) && t.scalar_type() == slot.scalar_type(),
                       fmt::format("stream buffer push: tensor '{}' has sample shape {} {}, the buffer holds {} {}", name,
                                   shape_of(t.sizes().slice(1)), c10::toString(t.scalar_type()),
                                   shape_of(slot.sizes().slice(1)), c10::toString(slot.scalar_type())),
                       "push samples of one shape and dtype");
  }
  for (std::int64_t row = 0; row < n; ++row) push_locked(lock, samples, row);
  if (count_ >= options_.ready_samples) ready_cv_.notify_all();
}

void StreamBuffer::push_locked(std::unique_lock<std::mutex>& lock, const std::map<std::string, at::Tensor>& samples,
                               std::int64_t row) {
  if (count_ == options_.capacity) {
    if (options_.when_full == "error") {
      BELLOWS_FAIL(ErrorKind::kResource, fmt::format("stream buffer is full ({} samples)", options_.capacity),
                   "take() samples for training more often, raise the capacity, or use when_full: drop_oldest");
    }
    if (options_.when_full == "block") {
      ready_cv_.notify_all();
      space_cv_.wait(lock, [&] { return count_ < options_.capacity || closed_; });
      BELLOWS_CHECK_DATA(!closed_, "the stream buffer was closed while a push waited for room", "push before close()");
    } else {
      --count_;  // the oldest sample (at head_ - count_) is overwritten
      ++dropped_;
    }
  }
  for (auto& [name, slot] : storage_) slot[head_].copy_(samples.at(name)[row]);
  head_ = (head_ + 1) % options_.capacity;
  ++count_;
  ++pushed_;
}

std::int64_t StreamBuffer::size() const {
  std::lock_guard lock(mutex_);
  return count_;
}
std::int64_t StreamBuffer::pushed() const {
  std::lock_guard lock(mutex_);
  return pushed_;
}
std::int64_t StreamBuffer::dropped() const {
  std::lock_guard lock(mutex_);
  return dropped_;
}
bool StreamBuffer::ready() const {
  std::lock_guard lock(mutex_);
  return count_ >= options_.ready_samples;
}
bool StreamBuffer::closed() const {
  std::lock_guard lock(mutex_);
  return closed_;
}

bool StreamBuffer::wait_ready(std::chrono::milliseconds timeout) {
  std::unique_lock lock(mutex_);
  ready_cv_.wait_for(lock, timeout, [&] { return count_ >= options_.ready_samples || closed_; });
  return count_ >= options_.ready_samples;
}

void StreamBuffer::close() {
  {
    std::lock_guard lock(mutex_);
    closed_ = true;
  }
  ready_cv_.notify_all();
  space_cv_.notify_all();
}

std::shared_ptr<TensorDataset> StreamBuffer::take(bool clear, std::string name, std::int64_t limit) {
  std::map<std::string, at::Tensor> snapshot;
  {
    std::lock_guard lock(mutex_);
    BELLOWS_CHECK_DATA(count_ > 0, "the stream buffer is empty", "wait_ready() before take(), or push samples first");
    const std::int64_t n = limit < 0 ? count_ : std::min(limit, count_);
    BELLOWS_CHECK_DATA(n > 0, "take: asked for 0 samples of the stream buffer", "take at least one sample");
    const std::int64_t start = (head_ - count_ + options_.capacity) % options_.capacity;  // the oldest
    const at::Tensor rows = (at::arange(n, at::kLong) + start).remainder(options_.capacity);
    for (const auto& [tensor_name, slot] : storage_) snapshot.emplace(tensor_name, slot.index_select(0, rows));
    if (clear) count_ -= n;  // the oldest n leave; head_ (the next slot to write) stays
  }
  if (clear) space_cv_.notify_all();
  const std::int64_t n = snapshot.begin()->second.size(0);
  TensorDatasetOptions o;
  o.name = fmt::format("{} ({} samples)", name, n);
  return std::make_shared<TensorDataset>(std::move(snapshot), o);
}

}  // namespace bellows::data
