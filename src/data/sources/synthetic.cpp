// data.source: synthetic -- data from a fixed random teacher, of every shape a built-in model reads: tables,
// sequences, images, token pairs and gridded fields (the embedded demo of each model).
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
    b.key("kind", &O::kind,
          "synthetic: what is made: a table (regression, classification), sequences, images, pairs of "
          "token sentences, or fields on a lat/lon grid (docs/data.md)")
        .choices(synthetic_kinds());
    b.key("samples", &O::samples, "synthetic: samples").min(1);
    b.key("features", &O::features, "synthetic regression, classification, sequences: input features (per step)")
        .min(1);
    b.key("targets", &O::targets, "synthetic regression: target values per sample").min(1);
    b.key("classes", &O::classes, "synthetic classification, images, pairs: classes").min(2);
    b.key("steps", &O::steps, "synthetic sequences: steps per sequence; pairs: tokens per sentence").min(1);
    b.key("channels", &O::channels, "synthetic images, grid: channels").min(1);
    b.key("side", &O::side, "synthetic images, grid: points per side (square)").min(2);
    b.key("vocab_size", &O::vocab_size, "synthetic pairs: token ids, the pad, [CLS] and [SEP] ids 0-2 included").min(5);
    b.key("noise", &O::noise, "synthetic regression, sequences: std of the noise on the targets").min(0);
  });
}

// The sizes that matter for the kind, for the dataset's name: "synthetic sequences (2048 samples, 16 steps x 8
// features)".
std::string describe_sizes(const SyntheticOptions& o) {
  if (o.kind == "sequences") return fmt::format("{} samples, {} steps x {} features", o.samples, o.steps, o.features);
  if (o.kind == "images" || o.kind == "grid")
    return fmt::format("{} samples, {} x {} x {}", o.samples, o.channels, o.side, o.side);
  if (o.kind == "pairs") return fmt::format("{} samples, {} tokens, {} ids", o.samples, 2 * o.steps + 3, o.vocab_size);
  return fmt::format("{} samples, {} features", o.samples, o.features);
}

SourceEntry synthetic_source() {
  SourceEntry e;
  e.name = "synthetic";
  e.help = "a random teacher's data: tables, sequences, images, token pairs or grids (data.kind)";
  e.needs_path = false;
  e.has_val_path = false;
  e.auto_split = "tail";
  e.add_keys = [](config::Schema& s) { synthetic_binding().declare(s); };
  e.open = [](const SourceRequest& r) -> std::shared_ptr<const Dataset> {
    SyntheticOptions o = synthetic_binding().read(*r.config);
    o.seed = r.seed;
    TensorDatasetOptions to;
    to.name = fmt::format("synthetic {} ({})", o.kind, describe_sizes(o));
    to.facts = synthetic_facts(o);
    return std::make_shared<TensorDataset>(make_synthetic(o), to);
  };
  // A grid's coordinates and a vocabulary are the options' (a model rebuilt from a checkpoint's config needs them).
  e.facts = [](const Dataset& d) {
    const auto* tensors = dynamic_cast<const TensorDataset*>(&d);
    return tensors ? tensors->facts() : DataFacts{};
  };
  e.facts_without_data = [](const SourceRequest& r) { return synthetic_facts(synthetic_binding().read(*r.config)); };
  return e;
}

const SourceRegistrar kSyntheticRegistered(synthetic_source());

}  // namespace
}  // namespace bellows::data
