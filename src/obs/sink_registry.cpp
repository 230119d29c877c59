// The sink registry; see sink_registry.h. Each sink registers itself from its own file.
#include "bellows/obs/sink_registry.h"

#include "bellows/util/registry.h"

namespace bellows::obs {

void register_sink(SinkEntry entry) { registry_of<SinkEntry>("sink").add(std::move(entry)); }
std::vector<SinkEntry> sink_entries() { return in_order(registry_of<SinkEntry>("sink").all()); }

}  // namespace bellows::obs
