// A data source for tests of measured trials (doctor_test.cpp, tune_test.cpp): `data.source: sleepy_test`,
// in-memory samples whose every batch takes 5 ms longer to load, as a slow disk or decoder would. Registered once
// for the test binary.
#include <ATen/ATen.h>

#include <chrono>
#include <map>
#include <memory>
#include <thread>

#include "bellows/data/source_registry.h"
#include "bellows/data/tensor_dataset.h"

namespace bellows::lab {
namespace {

// 16 features, one target (their sum); every batch takes 5 ms longer, as a slow disk or decoder would.
class SleepyDataset final : public data::Dataset {
 public:
  SleepyDataset() {
    const at::Tensor x = at::sin(at::arange(2048 * 16, at::kFloat).reshape({2048, 16}) * 0.37);
    inner_ = std::make_shared<data::TensorDataset>(std::map<std::string, at::Tensor>{{"x", x}, {"y", x.sum(1, true)}});
  }
  std::int64_t size() const override { return inner_->size(); }
  data::Example get(std::int64_t index, data::FetchContext& context) const override { return inner_->get(index, context); }
  data::Batch get_batch(std::span<const std::int64_t> indices, data::FetchContext& context) const override {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
    return inner_->get_batch(indices, context);
  }
  std::string describe(std::int64_t index) const override { return "sleepy sample " + std::to_string(index); }
  std::string name() const override { return "sleepy (5 ms per batch)"; }

 private:
  std::shared_ptr<data::TensorDataset> inner_;
};

data::SourceEntry sleepy_source() {
  data::SourceEntry e;
  e.name = "sleepy_test";
  e.help = "test: in-memory samples, 5 ms per batch";
  e.add_keys = [](config::Schema&) {};
  e.open = [](const data::SourceRequest&) { return std::make_shared<SleepyDataset>(); };
  e.needs_path = false;
  e.has_val_path = false;
  return e;
}
const data::SourceRegistrar kSleepySourceRegistered(sleepy_source());

}  // namespace
}  // namespace bellows::lab
