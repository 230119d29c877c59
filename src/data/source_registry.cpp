// The data-source registry; see source_registry.h. Each source registers itself from its own file in
// src/data/sources/ (a static SourceRegistrar), so adding a source touches no list here.
#include "bellows/data/source_registry.h"

#include "bellows/util/registry.h"

namespace bellows::data {
namespace {
Registry<SourceEntry>& sources() { return registry_of<SourceEntry>("data source"); }
}  // namespace

void register_source(SourceEntry entry) { sources().add(std::move(entry)); }
std::vector<SourceEntry> source_registry() { return sources().all(); }
std::vector<std::string> source_names() { return sources().names(); }
const SourceEntry& find_source(const std::string& name) { return sources().find(name); }

}  // namespace bellows::data
