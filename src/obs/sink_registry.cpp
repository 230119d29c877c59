// The sink registry; see sink_registry.h. Each sink registers itself from its own file.
#include "bellows/obs/sink_registry.h"

#include <algorithm>

#include "bellows/util/registry.h"

namespace bellows::obs {
namespace {

Registry<SinkEntry>& sinks() {  // function-local: registrars in other files may run first
  static Registry<SinkEntry> r("sink");
  return r;
}

}  // namespace

void register_sink(SinkEntry entry) { sinks().add(std::move(entry)); }

std::vector<SinkEntry> sink_entries() {
  std::vector<SinkEntry> all = sinks().all();
  std::stable_sort(all.begin(), all.end(), [](const SinkEntry& a, const SinkEntry& b) { return a.order < b.order; });
  return all;
}

}  // namespace bellows::obs
