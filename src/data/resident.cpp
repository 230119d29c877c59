// Data kept on the training device; see resident.h.
#include "bellows/data/resident.h"

#include <set>

#include "bellows/data/dataset.h"
#include "bellows/data/subset.h"

namespace bellows::data {

std::shared_ptr<const ResidentData> PlacementCache::get(c10::Device device,
                                                        const std::function<std::shared_ptr<const ResidentData>()>& place) const {
  std::lock_guard lock(mutex_);
  std::weak_ptr<const ResidentData>& slot = placed_[device.str()];
  if (auto held = slot.lock()) return held;
  std::shared_ptr<const ResidentData> placed = place();
  slot = placed;
  return placed;
}

namespace {
// A subset gathers from its base's placement: the dataset that holds the tensors.
const Dataset& storage_of(const Dataset& dataset) {
  const Dataset* d = &dataset;
  while (const auto* subset = dynamic_cast<const SubsetDataset*>(d)) d = &subset->base();
  return *d;
}
}  // namespace

std::int64_t placement_bytes(const std::vector<const Dataset*>& datasets) {
  std::set<const Dataset*> counted;
  std::int64_t bytes = 0;
  for (const Dataset* d : datasets) {
    if (d == nullptr) continue;
    const Dataset& storage = storage_of(*d);
    if (!counted.insert(&storage).second) continue;
    const std::int64_t b = storage.resident_bytes();
    if (b < 0) return -1;
    bytes += b;
  }
  return bytes;
}

std::string unplaceable(const std::vector<const Dataset*>& datasets) {
  for (const Dataset* d : datasets) {
    if (d != nullptr && storage_of(*d).resident_bytes() < 0) return d->name();
  }
  return "";
}

}  // namespace bellows::data
