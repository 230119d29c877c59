// The model registry; see registry.h. Each built-in model registers itself from its own .cpp file (a static
// ModelRegistrar), so adding a model touches no list here.
#include "bellows/models/registry.h"

#include "bellows/util/registry.h"

namespace bellows::models {
namespace {
Registry<ModelEntry>& models() { return registry_of<ModelEntry>("model"); }
}  // namespace

void register_model(ModelEntry entry) { models().add(std::move(entry)); }
std::vector<ModelEntry> registry() { return models().all(); }
const ModelEntry& find_model(const std::string& name) { return models().find(name); }

bool is_convolutional(const ModelEntry& entry, const config::Config& config) {
  return entry.has_convolutions ? entry.has_convolutions(config) : entry.convolutional;
}

}  // namespace bellows::models
