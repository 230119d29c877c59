// data.source: synthetic -- a fixed random teacher network's regression or classification data (the demo).
#include <fmt/format.h>

#include "bellows/config/binding.h"  // defines: Binding
#include "bellows/data/source_registry.h"
#include "bellows/data/synthetic.h"
#include "bellows/data/tensor_dataset.h"

namespace bellows::data {
namespace {

// The synthetic source's data.* keys of SyntheticOptions, bound once (config/binding.h); the seed is the run's.
const config::Binding<SyntheticOptions>& synthetic_binding() {
  using O = SyntheticOptions;
  return config::bound<O>("data.", [](config::Binding<O>& b) {
    b.key("kind", &O::kind, "synthetic: task").choices({"regression", "classification"});
    b.key("samples", &O::samples, "synthetic: samples").min(1);
    b.key("features", &O::features, "synthetic: features").min(1);
    b.key("classes", &O::classes, "synthetic classification: classes").min(2);
    b.key("noise", &O::noise, "synthetic regression: noise std").min(0);
  });
}

SourceEntry synthetic_source() {
  SourceEntry e;
  e.name = "synthetic";
  e.help = "a random teacher network's regression or classification data";
  e.needs_path = false;
  e.has_val_path = false;
  e.auto_split = "tail";
  e.add_keys = [](config::Schema& s) { synthetic_binding().declare(s); };
  e.open = [](const SourceRequest& r) -> std::shared_ptr<const Dataset> {
    SyntheticOptions o = synthetic_binding().read(*r.config);
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
