// data.source: synthetic -- a fixed random teacher network's regression or classification data (the demo).
#include <fmt/format.h>

#include "bellows/data/source_registry.h"
#include "bellows/data/synthetic.h"
#include "bellows/data/tensor_dataset.h"

namespace bellows::data {
namespace {

SourceEntry synthetic_source() {
  SourceEntry e;
  e.name = "synthetic";
  e.help = "a random teacher network's regression or classification data";
  e.needs_path = false;
  e.has_val_path = false;
  e.auto_split = "tail";
  e.add_keys = [](config::Schema& s) {
    using config::Type;
    auto node = [](auto v) { return YAML::Node(v); };
    s.add("data.kind", Type::kString, "synthetic: task").choices({"regression", "classification"}).default_value(node("regression"));
    s.add("data.samples", Type::kInt, "synthetic: samples").min(1).default_value(node(16384));
    s.add("data.features", Type::kInt, "synthetic: features").min(1).default_value(node(64));
    s.add("data.classes", Type::kInt, "synthetic classification: classes").min(2).default_value(node(10));
    s.add("data.noise", Type::kDouble, "synthetic regression: noise std").min(0).default_value(node(0.05));
  };
  e.open = [](const SourceRequest& r) -> std::shared_ptr<const Dataset> {
    const config::Config& c = *r.config;
    SyntheticOptions o;
    o.kind = config::get_string(c, "data.kind");
    o.samples = config::get_int(c, "data.samples");
    o.features = config::get_int(c, "data.features");
    o.classes = config::get_int(c, "data.classes");
    o.noise = config::get_double(c, "data.noise");
    o.seed = r.seed;
    TensorDatasetOptions to;
    to.name = fmt::format("synthetic {} ({} samples, {} features)", o.kind, o.samples, o.features);
    return std::make_shared<TensorDataset>(make_synthetic(o), to);
  };
  return e;
}

const SourceRegistrar kSyntheticRegistered(synthetic_source());

}  // namespace
}  // namespace bellows::data
