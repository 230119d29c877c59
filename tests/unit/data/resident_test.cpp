// data.on_device's CPU twin: a loader gathering from the dataset placed on the device delivers the same batches,
// bitwise, as the prefetching loader, for every in-memory dataset (tables with a dtype cast, windows over several
// series, train/validation subsets of both, the stream buffer's sessions), over epochs and across a resume in either
// direction; the placement is shared between views and counted once; data read per sample is refused by name.
#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "bellows/data/loader.h"
#include "bellows/data/resident.h"
#include "bellows/data/stream_buffer.h"
#include "bellows/data/subset.h"
#include "bellows/data/tensor_dataset.h"
#include "bellows/data/window.h"
#include "bellows/util/error.h"
#include "test_util.h"

namespace bellows::data {
namespace {

using test_support::error_from;

LoaderOptions options(bool on_device, std::int64_t batch_size = 5, bool drop_last = false) {
  LoaderOptions o;
  o.batch_size = batch_size;
  o.drop_last = drop_last;
  o.workers = on_device ? 0 : 2;  // the prefetching loader with workers, against the gathering one
  o.prefetch = 3;
  o.on_device = on_device;
  return o;
}

Loader loader(const std::shared_ptr<const Dataset>& d, bool on_device, std::int64_t batch_size = 5, bool drop_last = false) {
  SamplerOptions s;
  s.kind = "shuffle";
  s.seed = 11;
  return Loader(d, Sampler(d->size(), s), options(on_device, batch_size, drop_last));
}

std::vector<Batch> epoch(Loader& l, std::int64_t e, std::int64_t max_batches = -1) {
  std::vector<Batch> out;
  l.start_epoch(e);
  while (max_batches < 0 || static_cast<std::int64_t>(out.size()) < max_batches) {
    std::optional<Batch> b = l.next();
    if (!b) break;
    out.push_back(std::move(*b));
  }
  return out;
}

void expect_same(const std::vector<Batch>& a, const std::vector<Batch>& b) {
  ASSERT_EQ(a.size(), b.size());
  for (std::size_t k = 0; k < a.size(); ++k) {
    EXPECT_EQ(a[k].size, b[k].size) << "batch " << k;
    ASSERT_EQ(a[k].tensors.size(), b[k].tensors.size()) << "batch " << k;
    for (const auto& [name, t] : a[k].tensors) {
      const at::Tensor& u = b[k].at(name);
      EXPECT_EQ(t.scalar_type(), u.scalar_type()) << name;
      EXPECT_EQ(t.sizes(), u.sizes()) << name;
      EXPECT_TRUE(t.equal(u)) << "batch " << k << " tensor " << name;  // bitwise: the same gathers
    }
  }
}

// Two epochs from each loader, and a resume half-way through the second from the other kind's state.
void expect_loaders_agree(const std::shared_ptr<const Dataset>& d, std::int64_t batch_size = 5, bool drop_last = false) {
  Loader host = loader(d, false, batch_size, drop_last), device = loader(d, true, batch_size, drop_last);
  EXPECT_TRUE(device.stats().on_device);
  EXPECT_FALSE(host.stats().on_device);
  for (std::int64_t e = 0; e < 2; ++e) expect_same(epoch(host, e), epoch(device, e));
  Loader first = loader(d, false, batch_size, drop_last);
  epoch(first, 3, 2);
  Loader resumed = loader(d, true, batch_size, drop_last);
  resumed.load_state_dict(first.state_dict());
  Loader reference = loader(d, false, batch_size, drop_last);
  std::vector<Batch> all = epoch(reference, 3);
  expect_same(std::vector<Batch>(all.begin() + 2, all.end()), epoch(resumed, 3));
  Loader back = loader(d, false, batch_size, drop_last);
  Loader from = loader(d, true, batch_size, drop_last);
  epoch(from, 3, 1);
  back.load_state_dict(from.state_dict());
  expect_same(std::vector<Batch>(all.begin() + 1, all.end()), epoch(back, 3));
}

std::shared_ptr<TensorDataset> table(std::int64_t n) {
  TensorDatasetOptions o;
  o.name = "table";
  o.float_dtype = at::kFloat;  // float64 columns become float32 per batch on the host, once on the device
  return std::make_shared<TensorDataset>(
      std::map<std::string, at::Tensor>{{"x", at::randn({n, 3}, at::kDouble)}, {"y", at::arange(n, at::kLong) % 4},
                                        {"w", at::rand({n}, at::kFloat)}},
      o);
}

TEST(ResidentData, TablesGiveTheLoadersBatchesBitwise) {
  at::manual_seed(3);
  const auto t = table(37);
  EXPECT_EQ(t->resident_bytes(), 37 * 3 * 4 + 37 * 8 + 37 * 4);  // x counted as the float32 it becomes
  expect_loaders_agree(t);
  expect_loaders_agree(t, 8, /*drop_last=*/true);
  Loader device = loader(t, true);
  const Batch b = epoch(device, 0, 1).front();
  EXPECT_EQ(b.at("x").scalar_type(), at::kFloat);
  EXPECT_EQ(device.stats().batches, 1);
  EXPECT_EQ(device.stats().samples, 5);
  EXPECT_EQ(device.stats().workers, 0);
}

TEST(ResidentData, WindowsOverSeveralSeriesAndTheirSubsets) {
  at::manual_seed(5);
  WindowOptions w;
  w.length = 4;
  w.horizon = 2;
  w.stride = 3;
  w.target_columns = {0, 2};
  const auto windows = make_window_dataset({{"x", at::randn({3, 40, 3})}}, w, "series.npy");
  expect_loaders_agree(windows);
  WindowOptions own = w;
  own.target_columns = {};
  const auto with_y = make_window_dataset({{"x", at::randn({50, 2})}, {"y", at::randn({50})}}, own, "series.csv");
  expect_loaders_agree(with_y, 7);
  const auto self = make_window_dataset({{"x", at::randn({30, 2})}}, own, "self");  // the inputs are the targets
  EXPECT_EQ(self->resident_bytes(), 30 * 2 * 4);  // placed once
  expect_loaders_agree(self);

  auto [train, val] = split_indices(windows->size(), 0.25, "tail", 0);
  const auto train_set = std::make_shared<SubsetDataset>(windows, train, "train");
  const auto val_set = std::make_shared<SubsetDataset>(windows, val, "validation");
  expect_loaders_agree(train_set);
  expect_loaders_agree(val_set, 3);
  EXPECT_EQ(placement_bytes({train_set.get(), val_set.get()}), windows->resident_bytes());  // one placement
}

TEST(ResidentData, SubsetsOfATableShareOnePlacement) {
  at::manual_seed(7);
  const auto t = table(41);
  auto [train, val] = split_indices(t->size(), 0.3, "random", 9);
  const auto a = std::make_shared<SubsetDataset>(t, train, "train");
  const auto b = std::make_shared<SubsetDataset>(t, val, "validation");
  expect_loaders_agree(a, 4);
  expect_loaders_agree(b, 4);
  EXPECT_EQ(placement_bytes({a.get(), b.get()}), t->resident_bytes());
  const auto held = t->place(at::kCPU);
  EXPECT_EQ(t->place(at::kCPU).get(), held.get());  // placed once while anyone holds it
}

TEST(ResidentData, TheStreamBuffersSessionsGatherOnTheDevice) {
  StreamBufferOptions o;
  o.capacity = 32;
  StreamBuffer buffer(o);
  for (int k = 0; k < 2; ++k) buffer.push_many({{"x", at::randn({20, 2, 3})}, {"y", at::randn({20, 1})}});  // 8 dropped
  expect_loaders_agree(buffer.take(/*clear=*/false));
}

// A dataset read per sample: no placement, so the loader refuses on_device by name, and placement_bytes says -1.
class PerSample final : public Dataset {
 public:
  std::int64_t size() const override { return 4; }
  Example get(std::int64_t index, FetchContext&) const override { return {{"x", at::ones({2})}}; }
  std::string describe(std::int64_t index) const override { return "image " + std::to_string(index); }
  std::string name() const override { return "image folder photos/"; }
};

TEST(ResidentData, DataReadPerSampleIsRefusedByName) {
  const auto d = std::make_shared<PerSample>();
  EXPECT_EQ(placement_bytes({d.get()}), -1);
  EXPECT_EQ(unplaceable({table(3).get(), d.get()}), "image folder photos/");
  EXPECT_EQ(unplaceable({table(3).get(), nullptr}), "");
  const Error e = error_from([&] { loader(d, true); });
  EXPECT_EQ(e.kind(), ErrorKind::kConfig);
  EXPECT_NE(std::string(e.what()).find("data.on_device is true, but image folder photos/ is read and decoded per sample"), std::string::npos)
      << e.what();
}

}  // namespace
}  // namespace bellows::data
