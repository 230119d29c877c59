// The optimizer registry; see optimizer_registry.h. Each optimizer registers itself from its own file.
#include "bellows/train/optimizer_registry.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>

#include "bellows/util/check.h"
#include "bellows/util/registry.h"
#include "bellows/util/suggest.h"

namespace bellows::train {
namespace {

Registry<OptimizerEntry>& optimizers() { return registry_of<OptimizerEntry>("optimizer"); }

std::string optimizer_suggestion(const std::string& value, const std::vector<std::string>& valid) {
  auto best = closest_match(value, valid);
  return best ? fmt::format("did you mean '{}'? (valid: {})", *best, fmt::join(valid, ", "))
              : fmt::format("use one of: {}", fmt::join(valid, ", "));
}

}  // namespace

void register_optimizer(OptimizerEntry entry) { optimizers().add(std::move(entry)); }
std::vector<OptimizerEntry> optimizer_entries() { return in_order(optimizers().all()); }

std::vector<std::string> optimizer_names() {
  std::vector<std::string> names;
  for (const auto& e : optimizer_entries()) names.push_back(e.name);
  return names;
}

const OptimizerEntry& find_optimizer(const std::string& name) {
  const std::vector<std::string> names = optimizer_names();
  BELLOWS_CHECK_CONFIG(std::find(names.begin(), names.end(), name) != names.end(),
                       fmt::format("optim.type is '{}', an unknown optimizer", name), optimizer_suggestion(name, names));
  return optimizers().find(name);
}

int optimizer_state_tensors(const OptimizerOptions& options) {
  return static_cast<int>(find_optimizer(options.type).make(options)->state_kinds().size());
}

}  // namespace bellows::train
