// The prefetching loader: exactly-once delivery, order, resume, errors from workers, shutdown, memory bound,
// and the device stager driven one batch ahead (CPU twin).
#include <ATen/ATen.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <future>
#include <numeric>
#include <thread>

#include "bellows/data/loader.h"
#include "bellows/data/tensor_dataset.h"
#include "bellows/util/error.h"

namespace bellows::data {
namespace {

using ::testing::HasSubstr;
using namespace std::chrono_literals;

// Sample i is {"i": i}; loading sleeps a pseudo-random time, so workers finish out of order; a chosen
// index fails like a corrupt file would.
class IndexDataset final : public Dataset {
 public:
  IndexDataset(std::int64_t n, int max_sleep_us = 0, std::int64_t bad_index = -1)
      : n_(n), max_sleep_us_(max_sleep_us), bad_(bad_index) {}
  std::int64_t size() const override { return n_; }
  Example get(std::int64_t index, FetchContext& context) const override {
    if (max_sleep_us_ > 0) std::this_thread::sleep_for(std::chrono::microseconds((index * 7919) % max_sleep_us_));
    if (index == bad_) throw Error(ErrorKind::kData, "samples.bin offset " + std::to_string(index * 8) + ": bad record", "fix it");
    context.times.decode += 1e-6;
    return {{"i", at::scalar_tensor(index, at::kLong)}, {"seed", at::scalar_tensor(static_cast<std::int64_t>(context.seed % 1000003), at::kLong)}};
  }
  std::string describe(std::int64_t index) const override { return "samples.bin record " + std::to_string(index); }
  std::string name() const override { return "index dataset"; }
  void finish_on_device(Batch& batch) const override { batch.tensors["finished"] = at::ones({batch.size}); }

 private:
  std::int64_t n_;
  int max_sleep_us_;
  std::int64_t bad_;
};

std::vector<std::int64_t> drain(Loader& loader, std::int64_t epoch, std::int64_t max_batches = -1) {
  std::vector<std::int64_t> out;
  loader.start_epoch(epoch);
  for (std::int64_t k = 0; max_batches < 0 || k < max_batches; ++k) {
    auto b = loader.next();
    if (!b) break;
    const at::Tensor i = b->at("i");
    out.insert(out.end(), i.data_ptr<std::int64_t>(), i.data_ptr<std::int64_t>() + i.numel());
  }
  return out;
}

SamplerOptions shuffled(std::uint64_t seed, std::int64_t rank = 0, std::int64_t world = 1) {
  SamplerOptions o;
  o.kind = "shuffle";
  o.seed = seed;
  o.rank = rank;
  o.world_size = world;
  return o;
}

LoaderOptions lopts(std::int64_t batch, std::int64_t workers, std::int64_t prefetch = 4) {
  LoaderOptions o;
  o.batch_size = batch;
  o.workers = workers;
  o.prefetch = prefetch;
  return o;
}

TEST(Loader, EverySampleExactlyOncePerEpochForAnyWorkerCount) {
  auto ds = std::make_shared<IndexDataset>(103, 300);
  const auto reference = Sampler(103, shuffled(5)).indices(1);
  for (std::int64_t workers : {0, 1, 2, 3}) {
    for (std::int64_t prefetch : {1, 4}) {
      Loader loader(ds, Sampler(103, shuffled(5)), lopts(10, workers, prefetch));
      EXPECT_EQ(loader.batches_per_epoch(), 11);
      const auto got = drain(loader, 1);
      EXPECT_EQ(got, reference) << workers << " workers, prefetch " << prefetch;  // exact order, not just the set
    }
  }
}

TEST(Loader, EverySampleExactlyOnceAcrossRanks) {
  auto ds = std::make_shared<IndexDataset>(120, 100);
  for (std::int64_t world : {1, 2, 3, 4}) {
    std::vector<std::int64_t> all;
    for (std::int64_t rank = 0; rank < world; ++rank) {
      Loader loader(ds, Sampler(120, shuffled(9, rank, world)), lopts(7, 2));
      const auto mine = drain(loader, 0);
      all.insert(all.end(), mine.begin(), mine.end());
    }
    std::sort(all.begin(), all.end());
    std::vector<std::int64_t> expected(120);
    std::iota(expected.begin(), expected.end(), 0);
    EXPECT_EQ(all, expected) << world << " ranks";
  }
}

TEST(Loader, SameSeedSameOrderAndDropLast) {
  auto ds = std::make_shared<IndexDataset>(50);
  LoaderOptions o = lopts(8, 2);
  o.drop_last = true;
  Loader a(ds, Sampler(50, shuffled(1)), o);
  Loader b(ds, Sampler(50, shuffled(1)), o);
  EXPECT_EQ(a.batches_per_epoch(), 6);
  const auto ea = drain(a, 0);
  EXPECT_EQ(ea.size(), 48u);
  EXPECT_EQ(ea, drain(b, 0));
  EXPECT_NE(drain(a, 1), ea);
}

TEST(Loader, ResumeMidEpochYieldsExactlyTheRemainingBatches) {
  auto ds = std::make_shared<IndexDataset>(97, 200);
  Loader full(ds, Sampler(97, shuffled(4)), lopts(10, 2));
  const auto whole = drain(full, 2);

  Loader first(ds, Sampler(97, shuffled(4)), lopts(10, 3));
  const auto head = drain(first, 2, 4);  // 4 batches, then "crash"
  ASSERT_EQ(head.size(), 40u);
  const StateDict saved = first.state_dict();

  for (std::int64_t workers : {0, 2}) {
    Loader resumed(ds, Sampler(97, shuffled(4)), lopts(10, workers));
    resumed.load_state_dict(saved);
    EXPECT_EQ(resumed.remaining_in_epoch(), 6);
    const auto tail = drain(resumed, 2);
    std::vector<std::int64_t> joined = head;
    joined.insert(joined.end(), tail.begin(), tail.end());
    EXPECT_EQ(joined, whole) << workers << " workers";
    EXPECT_EQ(drain(resumed, 3).size(), 97u);  // the next epoch starts from its beginning
  }
}

// Another batch size continues from the samples consumed (8 of 20 in batches of 4: 2 batches of 4, 1 of 8, 4 of 2),
// rounded down to a whole batch (8 / 5 -> 1 batch of 5); another seed is an error.
TEST(Loader, ResumeConvertsAnotherBatchSizeAndRejectsAnotherSeed) {
  auto ds = std::make_shared<IndexDataset>(20);
  Loader a(ds, Sampler(20, shuffled(1)), lopts(4, 0));
  drain(a, 0, 2);
  for (const auto& [batch, remaining] : std::vector<std::pair<std::int64_t, std::int64_t>>{{8, 2}, {2, 6}, {5, 3}}) {
    Loader other_batch(ds, Sampler(20, shuffled(1)), lopts(batch, 0));
    other_batch.load_state_dict(a.state_dict());
    EXPECT_EQ(other_batch.remaining_in_epoch(), remaining) << "batch " << batch;
  }
  Loader seeded(ds, Sampler(20, shuffled(2)), lopts(4, 0));
  EXPECT_THROW(seeded.load_state_dict(a.state_dict()), Error);
}

TEST(Loader, AugmentationSeedDependsOnEpochAndNotOnWorkers) {
  auto ds = std::make_shared<IndexDataset>(16);
  auto seeds = [&](std::int64_t workers, std::int64_t epoch) {
    Loader l(ds, Sampler(16, shuffled(3)), lopts(4, workers));
    l.start_epoch(epoch);
    return l.next()->at("seed")[0].item<std::int64_t>();
  };
  EXPECT_EQ(seeds(0, 0), seeds(3, 0));
  EXPECT_NE(seeds(0, 0), seeds(0, 1));
}

void expect_worker_error(std::int64_t workers) {
  auto ds = std::make_shared<IndexDataset>(64, 50, /*bad_index=*/37);
  Loader loader(ds, Sampler(64, SamplerOptions{.kind = "sequential"}), lopts(8, workers));
  loader.start_epoch(0);
  for (int k = 0; k < 4; ++k) ASSERT_TRUE(loader.next().has_value());  // samples 0..31 are fine
  try {
    loader.next();
    ADD_FAILURE() << "the bad sample did not raise";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kData);
    EXPECT_THAT(e.message(), HasSubstr("sample 37"));
    EXPECT_THAT(e.message(), HasSubstr("samples.bin offset 296: bad record"));
    EXPECT_THAT(e.message(), HasSubstr("loading batch 4 of epoch 0"));
    EXPECT_THAT(e.message(), HasSubstr("samples.bin record 32"));  // the batch's first sample
    EXPECT_EQ(e.hint(), "fix it");
  }
}

TEST(Loader, WorkerExceptionReachesTheTrainingThreadWithContext) {
  for (std::int64_t workers : {0, 1, 3}) {
    // Run in a thread with a deadline: a lost error would otherwise hang the test.
    auto done = std::async(std::launch::async, [workers] { expect_worker_error(workers); });
    ASSERT_EQ(done.wait_for(30s), std::future_status::ready) << "hang with " << workers << " workers";
    done.get();
  }
}

// A worker that runs out of memory: the training thread gets a resource error (the CLI's exit code 4) with the
// batch it was loading, not an internal error.
TEST(Loader, AnAllocationFailureInAWorkerStaysAResourceError) {
  class Hungry final : public Dataset {
   public:
    std::int64_t size() const override { return 8; }
    Example get(std::int64_t index, FetchContext&) const override {
      if (index == 5) return {{"x", at::empty({std::int64_t{1} << 44})}};  // 64 TiB: the CPU allocator fails
      return {{"x", at::zeros({2})}};
    }
    std::string describe(std::int64_t index) const override { return "row " + std::to_string(index); }
    std::string name() const override { return "hungry"; }
  };
  for (std::int64_t workers : {0, 2}) {
    Loader loader(std::make_shared<Hungry>(), Sampler(8, SamplerOptions{.kind = "sequential"}), lopts(2, workers));
    loader.start_epoch(0);
    ASSERT_TRUE(loader.next());
    ASSERT_TRUE(loader.next());
    try {
      loader.next();
      ADD_FAILURE() << "64 TiB were allocated";
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::kResource) << e.message();
      EXPECT_THAT(e.message(), HasSubstr("out of memory")) << workers << " workers";
      EXPECT_THAT(e.message(), HasSubstr("while loading batch 2 of epoch 0 (2 samples, the first row 4)"));
      EXPECT_THAT(e.hint(), HasSubstr("reduce data.batch_size"));
    }
  }
}

TEST(Loader, ConsumerStoppingEarlyShutsDownWithoutDeadlock) {
  auto finished = std::async(std::launch::async, [] {
    auto ds = std::make_shared<IndexDataset>(10000, 2000);
    for (std::int64_t workers : {1, 4}) {
      Loader loader(ds, Sampler(10000, shuffled(0)), lopts(16, workers, 8));
      loader.start_epoch(0);
      loader.next();
      loader.start_epoch(1);  // abandon an epoch with batches in flight
      loader.next();
    }  // destroyed with workers busy and the queue full
  });
  ASSERT_EQ(finished.wait_for(30s), std::future_status::ready) << "loader shutdown hung";
  finished.get();
}

TEST(Loader, QueueMemoryIsBoundedByThePrefetchDepth) {
  auto ds = std::make_shared<TensorDataset>(std::map<std::string, at::Tensor>{{"x", at::zeros({256, 1024})}});  // 4 KiB/sample
  Loader loader(ds, Sampler(256, shuffled(0)), lopts(8, 2, 3));
  loader.start_epoch(0);
  while (loader.next()) std::this_thread::sleep_for(2ms);  // a slow consumer: workers fill the queue
  const LoaderStats s = loader.stats();
  const std::int64_t batch_bytes = 8 * 1024 * 4;
  EXPECT_EQ(s.batches, 32);
  EXPECT_EQ(s.samples, 256);
  EXPECT_EQ(s.bytes, 32 * batch_bytes);
  EXPECT_GE(s.queue_bytes_peak, batch_bytes);      // something was prefetched
  EXPECT_LE(s.queue_bytes_peak, 3 * batch_bytes);  // never more than `prefetch` batches waiting
  EXPECT_GT(s.wall_seconds, 0);
  EXPECT_GT(s.stages.read, 0);
}

// Batches delivered after reset_stats() were loaded before it when the queue was full: their busy time lies
// outside the timed wall time (what made `bench data` print 112% utilisation), but inside the busy span.
TEST(Loader, BusyTimeLiesWithinTheBusySpanWhenTheQueueWasFullAtTheReset) {
  class Sleepy final : public Dataset {  // 1 ms per sample
   public:
    std::int64_t size() const override { return 256; }
    Example get(std::int64_t index, FetchContext&) const override {
      std::this_thread::sleep_for(1ms);
      return {{"i", at::scalar_tensor(index, at::kLong)}};
    }
    std::string describe(std::int64_t index) const override { return std::to_string(index); }
    std::string name() const override { return "sleepy"; }
  };
  auto ds = std::make_shared<Sleepy>();
  Loader loader(ds, Sampler(256, shuffled(0)), lopts(8, 2, 16));
  loader.start_epoch(0);
  ASSERT_TRUE(loader.next());
  std::this_thread::sleep_for(300ms);  // the 16 queued batches (64 ms of loading for 2 workers) are ready
  loader.reset_stats();
  for (int k = 0; k < 16; ++k) ASSERT_TRUE(loader.next());
  const LoaderStats s = loader.stats();
  EXPECT_EQ(s.batches, 16);
  EXPECT_GE(s.worker_busy_seconds, 16 * 8 * 1e-3);
  EXPECT_GT(s.worker_busy_seconds, 2 * s.wall_seconds);  // the old measure: over 100%
  EXPECT_GE(s.busy_span_seconds, 0.25);                  // the first of them began before the sleep
  EXPECT_LE(s.worker_busy_seconds, 2 * s.busy_span_seconds);
}

TEST(Loader, SynchronousPathWhenPrefetchIsOff) {
  auto ds = std::make_shared<IndexDataset>(30);
  LoaderOptions o = lopts(4, 3);
  o.use_prefetch = false;
  Loader loader(ds, Sampler(30, shuffled(2)), o);
  EXPECT_FALSE(loader.asynchronous());
  EXPECT_EQ(drain(loader, 0), Sampler(30, shuffled(2)).indices(0));
  EXPECT_EQ(loader.stats().workers, 0);
}

TEST(Loader, FinishOnDeviceRunsOnEveryBatch) {
  auto ds = std::make_shared<IndexDataset>(10);
  Loader loader(ds, Sampler(10, shuffled(0)), lopts(4, 1));
  loader.start_epoch(0);
  while (auto b = loader.next()) EXPECT_EQ(b->at("finished").size(0), b->size);
}

// A stager that records its calls, standing in for the CUDA stream stager.
class RecordingStager final : public DeviceStager {
 public:
  explicit RecordingStager(std::vector<std::string>* log) : log_(log) {}
  c10::Device device() const override { return c10::Device(c10::kCPU); }
  bool pins_memory() const override { return true; }
  void prepare_host(Batch& batch) const override { batch.tensors["prepared"] = at::ones({1}); }
  void begin(Batch batch) override {
    log_->push_back("begin " + std::to_string(batch.at("i")[0].item<std::int64_t>()));
    staged_ = std::move(batch);
  }
  bool pending() const override { return staged_.has_value(); }
  Batch finish() override {
    log_->push_back("finish " + std::to_string(staged_->at("i")[0].item<std::int64_t>()));
    Batch b = std::move(*staged_);
    staged_.reset();
    return b;
  }

 private:
  std::vector<std::string>* log_;
  std::optional<Batch> staged_;
};

TEST(Loader, StagerCopiesOneBatchAheadOfTheTrainingStep) {
  std::vector<std::string> log;
  auto ds = std::make_shared<IndexDataset>(8);
  Loader loader(ds, Sampler(8, SamplerOptions{.kind = "sequential"}), lopts(2, 1), std::make_unique<RecordingStager>(&log));
  // Waits (for a condition, not a time) until `n` batches are loaded and waiting in the queue.
  const auto wait_until_queued = [&](std::int64_t n) {
    const auto deadline = std::chrono::steady_clock::now() + 30s;
    while (loader.stats().queued < n) {
      ASSERT_LT(std::chrono::steady_clock::now(), deadline) << "the worker never loaded " << n << " batches ahead";
      std::this_thread::sleep_for(1ms);
    }
  };
  loader.start_epoch(0);
  wait_until_queued(2);  // batches 0 and 1
  auto b0 = loader.next();
  EXPECT_TRUE(b0->tensors.count("prepared"));  // prepared (pinned) in the worker
  wait_until_queued(1);  // batch 2 (batch 1 is staged)
  auto b1 = loader.next();
  // Batch 1's copy began before batch 0 was handed out; batch 2's before batch 1 was.
  EXPECT_EQ(log, (std::vector<std::string>{"begin 0", "finish 0", "begin 2", "finish 2", "begin 4"}));
  EXPECT_EQ(b1->at("i")[0].item<std::int64_t>(), 2);
}

}  // namespace
}  // namespace bellows::data
