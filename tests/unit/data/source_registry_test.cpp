// The data-source registry: a source registered from its own file (here, this test's) is a data.source choice
// with its own keys, opened by build_datasets with the run's splits; facts reach the model side; unknown and
// duplicate names are errors that say what to do.
#include "bellows/data/source_registry.h"

#include <ATen/ATen.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "bellows/data/build.h"
#include "bellows/data/stream_buffer.h"
#include "bellows/data/tensor_dataset.h"
#include "bellows/util/error.h"
#include "data/data_config.h"
#include "test_util.h"

namespace bellows::data {
namespace {

using ::testing::HasSubstr;
using test_support::data_config;
using test_support::error_from;

// A dataset that knows its class names, so the source can hand them to a model as facts.
class CountingDataset final : public Dataset {
 public:
  explicit CountingDataset(std::int64_t n) : n_(n) {}
  std::int64_t size() const override { return n_; }
  Example get(std::int64_t index, FetchContext&) const override {
    return {{"x", at::full({2}, static_cast<float>(index))}, {"y", at::scalar_tensor(index % 2, at::kLong)}};
  }
  std::string describe(std::int64_t index) const override { return "row " + std::to_string(index); }
  std::string name() const override { return "counting"; }

 private:
  std::int64_t n_;
};

SourceEntry counting_source() {
  SourceEntry e;
  e.name = "test_counting";
  e.help = "0, 1, 2, ... (a test source)";
  e.needs_path = false;
  e.add_keys = [](config::Schema& s) { s.add("data.counting.rows", config::Type::kInt, "rows").min(1).default_value(YAML::Node(10)); };
  e.open = [](const SourceRequest& r) -> std::shared_ptr<const Dataset> {
    return std::make_shared<CountingDataset>(config::get_int(*r.config, "data.counting.rows"));
  };
  e.facts = [](const Dataset& d) {
    DataFacts f;
    if (dynamic_cast<const CountingDataset*>(&d)) f.classes = std::vector<std::string>{"even", "odd"};
    return f;
  };
  return e;
}

const SourceRegistrar kCountingRegistered(counting_source());

TEST(SourceRegistry, ARegisteredSourceIsAChoiceWithItsKeysSplitsAndFacts) {
  EXPECT_THAT(source_names(), ::testing::Contains("test_counting"));
  for (const char* builtin : {"csv", "image_folder", "netcdf", "npy", "stream", "synthetic", "text_pairs"}) {
    EXPECT_THAT(source_names(), ::testing::Contains(builtin));
  }
  const DataSplits s = build_datasets(data_config("data: {source: test_counting, counting: {rows: 40}, val_fraction: 0.25, val_split: tail}\n"), 0);
  EXPECT_EQ(s.train->size(), 30);
  ASSERT_TRUE(s.val);
  EXPECT_EQ(s.val->size(), 10);
  ASSERT_TRUE(s.facts.classes);
  EXPECT_EQ(*s.facts.classes, (std::vector<std::string>{"even", "odd"}));
  EXPECT_EQ(s.facts.source, "counting");
  // Facts are found through the train/validation subsets too.
  ASSERT_TRUE(facts_of(*s.val).classes);
  // Its keys are validated like every other: a wrong type names the key.
  const Error e = error_from([] { data_config("data: {source: test_counting, counting: {rows: many}}\n"); });
  EXPECT_THAT(e.message(), HasSubstr("data.counting.rows"));
}

TEST(SourceRegistry, UnknownAndDuplicateNamesAreErrors) {
  const Error unknown = error_from([] { find_source("nmpy"); });
  EXPECT_EQ(unknown.kind(), ErrorKind::kConfig);
  EXPECT_THAT(unknown.message(), HasSubstr("unknown data source 'nmpy'; did you mean 'npy'?"));
  const Error twice = error_from([] { register_source(counting_source()); });
  EXPECT_EQ(twice.kind(), ErrorKind::kInternal);
  EXPECT_THAT(twice.message(), HasSubstr("'test_counting' is registered twice"));
}

TEST(SourceRegistry, StreamSourceTakesWhatTheProgramPushed) {
  const config::Config c = data_config("data: {source: stream, val_fraction: 0.0, stream: {capacity: 8}}\n");
  const Error none = error_from([&] { build_datasets(c, 0); });
  EXPECT_EQ(none.kind(), ErrorKind::kConfig);
  EXPECT_THAT(none.message(), HasSubstr("no program attached a stream buffer"));
  auto buffer = std::make_shared<StreamBuffer>(stream_buffer_options(c));
  for (int i = 0; i < 5; ++i) buffer->push({{"x", at::full({3}, static_cast<float>(i))}, {"y", at::full({1}, 2.0f * i)}});
  const DataSplits s = build_datasets(c, 0, buffer);
  EXPECT_EQ(s.train->size(), 5);
  EXPECT_TRUE(s.temporal);
  EXPECT_EQ(buffer->size(), 0);  // data.stream.clear: the next session trains on new samples
  FetchContext fetch;
  EXPECT_EQ(s.train->get(4, fetch).at("x")[0].item<float>(), 4.0f);
}

}  // namespace
}  // namespace bellows::data
