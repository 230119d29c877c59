// The one representation of saveable state in bellows: named tensors, with scalars stored as 0-dim tensors.
// Every stateful object (optimizer, scaler, schedule, EMA, sampler, counters) has
//   StateDict state_dict() const;   void load_state_dict(const StateDict&);
// so that a checkpoint is the union of their dicts under prefixes ("optim.", "scaler.", ...).
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <map>
#include <string>
#include <string_view>

namespace bellows {

using StateDict = std::map<std::string, at::Tensor>;  // ordered, so files are deterministic

// Scalars as 0-dim CPU tensors: int64 for integers and bools, float64 for reals.
void put_int(StateDict& dict, const std::string& key, std::int64_t value);
void put_double(StateDict& dict, const std::string& key, double value);

// Typed reads; a missing key or a tensor that is not a scalar raises a kData error naming the key.
const at::Tensor& get_tensor(const StateDict& dict, const std::string& key);
std::int64_t get_int(const StateDict& dict, const std::string& key);
double get_double(const StateDict& dict, const std::string& key);
bool contains(const StateDict& dict, const std::string& key);

// `prefix` + "." + key for every entry of `from`, added to `into`.
void merge_prefixed(StateDict& into, const std::string& prefix, const StateDict& from);
// The entries whose keys start with `prefix` + ".", with that prefix removed.
StateDict sub_dict(const StateDict& dict, const std::string& prefix);

// Every tensor detached, in host (CPU) memory and contiguous, as files are written from. copy = true: always
// fresh storage that nothing else writes to, so a background writer can read it while training goes on;
// false: a tensor already so is shared, not copied.
StateDict to_host(const StateDict& dict, bool copy = true);

}  // namespace bellows
