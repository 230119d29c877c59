// The model registry; see registry.h. Each built-in model registers itself from its own .cpp file (a static
// ModelRegistrar), so adding a model touches no list here.
#include "bellows/models/registry.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <deque>
#include <mutex>

#include "bellows/util/check.h"
#include "bellows/util/suggest.h"

namespace bellows::models {
namespace {

// Function-local statics: registrars in other translation units may run before anything here is initialised.
std::mutex& registry_mutex() {
  static std::mutex m;
  return m;
}
std::deque<ModelEntry>& entries() {  // a deque: find_model hands out references
  static std::deque<ModelEntry> e;
  return e;
}

}  // namespace

void register_model(ModelEntry entry) {
  std::lock_guard<std::mutex> lock(registry_mutex());
  for (const auto& e : entries()) {
    BELLOWS_CHECK(e.name != entry.name, fmt::format("model '{}' is registered twice", entry.name),
                  "give the model another name");
  }
  entries().push_back(std::move(entry));
}

std::vector<ModelEntry> registry() {
  std::lock_guard<std::mutex> lock(registry_mutex());
  std::vector<ModelEntry> sorted(entries().begin(), entries().end());
  std::sort(sorted.begin(), sorted.end(), [](const ModelEntry& a, const ModelEntry& b) { return a.name < b.name; });
  return sorted;
}

const ModelEntry& find_model(const std::string& name) {
  std::lock_guard<std::mutex> lock(registry_mutex());
  std::vector<std::string> names;
  for (const auto& e : entries()) {
    if (e.name == name) return e;
    names.push_back(e.name);
  }
  std::sort(names.begin(), names.end());
  const auto match = closest_match(name, names);
  BELLOWS_FAIL(ErrorKind::kConfig,
               fmt::format("unknown model '{}'{}", name, match ? fmt::format("; did you mean '{}'?", *match) : std::string()),
               "registered models: " + fmt::format("{}", fmt::join(names, ", ")));
}

}  // namespace bellows::models
