// The stream buffer: bounded, thread-safe pushes, the ready trigger, and snapshots for training sessions.
#include <ATen/ATen.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <future>
#include <thread>

#include "bellows/data/stream_buffer.h"
#include "bellows/util/error.h"

namespace bellows::data {
namespace {

using ::testing::HasSubstr;
using namespace std::chrono_literals;

Example sample(float v) { return {{"x", at::full({3}, v)}, {"y", at::scalar_tensor(static_cast<std::int64_t>(v), at::kLong)}}; }

std::vector<float> firsts(const TensorDataset& d) {
  const at::Tensor x = d.tensors().at("x").select(1, 0).contiguous();
  return {x.data_ptr<float>(), x.data_ptr<float>() + x.numel()};
}

TEST(StreamBuffer, DropOldestKeepsTheNewestInOrder) {
  StreamBuffer buf({.capacity = 4, .when_full = "drop_oldest", .ready_samples = 3});
  for (int i = 0; i < 6; ++i) buf.push(sample(static_cast<float>(i)));
  EXPECT_EQ(buf.size(), 4);
  EXPECT_EQ(buf.pushed(), 6);
  EXPECT_EQ(buf.dropped(), 2);
  auto d = buf.take(/*clear=*/false);
  EXPECT_EQ(firsts(*d), (std::vector<float>{2, 3, 4, 5}));
  EXPECT_EQ(d->tensors().at("y")[3].item<std::int64_t>(), 5);
  EXPECT_EQ(buf.size(), 4);
  buf.take(/*clear=*/true);
  EXPECT_EQ(buf.size(), 0);
  EXPECT_FALSE(buf.ready());
}

// A job's ranks take equal shares (app/online.h): the oldest `limit` samples leave, the newer wait, across the ring's wrap.
TEST(StreamBuffer, TakeWithALimitTakesTheOldestAndKeepsTheRest) {
  StreamBuffer buf({.capacity = 5, .when_full = "drop_oldest", .ready_samples = 1});
  for (int i = 0; i < 7; ++i) buf.push(sample(static_cast<float>(i)));  // holds 2..6, the ring wrapped
  EXPECT_EQ(firsts(*buf.take(/*clear=*/true, "s", 3)), (std::vector<float>{2, 3, 4}));
  EXPECT_EQ(buf.size(), 2);
  buf.push(sample(7));
  EXPECT_EQ(firsts(*buf.take(/*clear=*/false, "s", 10)), (std::vector<float>{5, 6, 7}));  // more than it holds: all
  EXPECT_EQ(firsts(*buf.take(/*clear=*/true, "s", 1)), (std::vector<float>{5}));
  EXPECT_EQ(firsts(*buf.take(/*clear=*/true)), (std::vector<float>{6, 7}));
  EXPECT_EQ(buf.size(), 0);
  buf.push(sample(8));
  EXPECT_THROW(buf.take(true, "s", 0), Error);
}

TEST(StreamBuffer, ReadyTriggerWakesAWaiter) {
  StreamBuffer buf({.capacity = 100, .ready_samples = 10});
  auto waiter = std::async(std::launch::async, [&] { return buf.wait_ready(10s); });
  std::thread producer([&] {
    for (int i = 0; i < 10; ++i) buf.push(sample(1));
  });
  ASSERT_EQ(waiter.wait_for(10s), std::future_status::ready);
  EXPECT_TRUE(waiter.get());
  producer.join();
  EXPECT_FALSE(StreamBuffer({.capacity = 5}).wait_ready(10ms));  // nothing pushed: times out, not ready
}

TEST(StreamBuffer, ConcurrentPushesLoseNothing) {
  StreamBuffer buf({.capacity = 4000});
  std::vector<std::thread> producers;
  for (int p = 0; p < 4; ++p) {
    producers.emplace_back([&buf, p] {
      for (int i = 0; i < 1000; ++i) buf.push(sample(static_cast<float>(p * 1000 + i)));
    });
  }
  for (auto& t : producers) t.join();
  auto values = firsts(*buf.take());
  std::sort(values.begin(), values.end());
  ASSERT_EQ(values.size(), 4000u);
  for (int i = 0; i < 4000; ++i) ASSERT_EQ(values[static_cast<std::size_t>(i)], static_cast<float>(i));
}

TEST(StreamBuffer, BlockWaitsForRoomAndErrorFails) {
  StreamBuffer blocking({.capacity = 2, .when_full = "block"});
  blocking.push(sample(0));
  blocking.push(sample(1));
  auto pusher = std::async(std::launch::async, [&] { blocking.push(sample(2)); });
  EXPECT_EQ(pusher.wait_for(100ms), std::future_status::timeout);  // full: the push waits
  blocking.take();                                                  // a session takes the samples
  ASSERT_EQ(pusher.wait_for(10s), std::future_status::ready);
  pusher.get();
  EXPECT_EQ(firsts(*blocking.take()), (std::vector<float>{2}));

  StreamBuffer strict({.capacity = 1, .when_full = "error"});
  strict.push(sample(0));
  try {
    strict.push(sample(1));
    ADD_FAILURE() << "push into a full buffer succeeded";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kResource);
    EXPECT_THAT(e.message(), HasSubstr("stream buffer is full (1 samples)"));
  }
}

TEST(StreamBuffer, ShapeMismatchAndEmptyTakeAreErrors) {
  StreamBuffer buf({.capacity = 8});
  buf.push(sample(0));
  try {
    buf.push({{"x", at::zeros({4})}, {"y", at::scalar_tensor(0, at::kLong)}});
    ADD_FAILURE() << "a wrong shape was accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kData);
    EXPECT_THAT(e.message(), HasSubstr("tensor 'x' has sample shape [4] Float, the buffer holds [3] Float"));
  }
  buf.push_many({{"x", at::ones({5, 3})}, {"y", at::zeros({5}, at::kLong)}});
  EXPECT_EQ(buf.size(), 6);
  buf.take();
  EXPECT_THROW(buf.take(), Error);
}

}  // namespace
}  // namespace bellows::data
