// The optimizer registry; see optimizer_registry.h. Each optimizer registers itself from its own file.
#include "bellows/train/optimizer_registry.h"

#include <fmt/format.h>

#include <algorithm>

#include "bellows/util/check.h"
#include "bellows/util/registry.h"

namespace bellows::train {
namespace {

Registry<OptimizerEntry>& optimizers() { return registry_of<OptimizerEntry>("optimizer"); }

}  // namespace

void register_optimizer(OptimizerEntry entry) { optimizers().add(std::move(entry)); }
std::vector<OptimizerEntry> optimizer_entries() { return in_order(optimizers().all()); }

std::vector<std::string> optimizer_names() { return names_of(optimizer_entries()); }

const OptimizerEntry& find_optimizer(const std::string& name) {
  const std::vector<std::string> names = optimizer_names();
  BELLOWS_CHECK_CONFIG(std::find(names.begin(), names.end(), name) != names.end(),
                       fmt::format("optim.type is '{}', an unknown optimizer", name), suggestion_hint(name, names));
  return optimizers().find(name);
}

int optimizer_state_tensors(const OptimizerOptions& options) {
  return static_cast<int>(find_optimizer(options.type).make(options)->state_kinds().size());
}

}  // namespace bellows::train
