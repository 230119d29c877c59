// StateDict helpers; see state_dict.h.
#include "bellows/util/state_dict.h"

#include <cmath>

#include <ATen/ATen.h>
#include <fmt/format.h>

#include "bellows/util/check.h"

namespace bellows {
namespace {

std::string known_keys(const StateDict& dict) {
  std::string keys;
  std::size_t shown = 0;
  for (const auto& [k, v] : dict) {
    if (shown++ == 8) {
      keys += ", ...";
      break;
    }
    keys += (keys.empty() ? "" : ", ") + k;
  }
  return keys.empty() ? "none" : keys;
}

const at::Tensor& scalar(const StateDict& dict, const std::string& key) {
  const at::Tensor& t = get_tensor(dict, key);
  BELLOWS_CHECK_DATA(t.numel() == 1, fmt::format("state entry '{}' has {} elements, expected a scalar", key, t.numel()),
                     "the state was written by a different version or for a different object");
  return t;
}

}  // namespace

void put_int(StateDict& dict, const std::string& key, std::int64_t value) {
  dict[key] = at::scalar_tensor(value, at::TensorOptions().dtype(at::kLong));
}

void put_double(StateDict& dict, const std::string& key, double value) {
  dict[key] = at::scalar_tensor(value, at::TensorOptions().dtype(at::kDouble));
}

bool contains(const StateDict& dict, const std::string& key) { return dict.find(key) != dict.end(); }

const at::Tensor& get_tensor(const StateDict& dict, const std::string& key) {
  auto it = dict.find(key);
  BELLOWS_CHECK_DATA(it != dict.end(), fmt::format("state has no entry '{}' (has: {})", key, known_keys(dict)),
                     "the state was written by a different version or for a different object");
  return it->second;
}

std::int64_t get_int(const StateDict& dict, const std::string& key) {
  const at::Tensor& t = scalar(dict, key);
  if (!at::isFloatingType(t.scalar_type())) return t.item<std::int64_t>();
  // A float where an integer belongs (a state written by hand): whole and in range, or a data error (LibTorch's
  // own conversion throws an internal error on NaN or 1e30; found by fuzzing the checkpoint reader).
  const double v = t.item<double>();
  BELLOWS_CHECK_DATA(std::isfinite(v) && v == std::floor(v) && std::fabs(v) < 9.2e18,
                     fmt::format("state entry '{}' holds {}, expected an integer", key, v),
                     "the state was written by something other than bellows, or is corrupt");
  return static_cast<std::int64_t>(v);
}

double get_double(const StateDict& dict, const std::string& key) { return scalar(dict, key).item<double>(); }

void merge_prefixed(StateDict& into, const std::string& prefix, const StateDict& from) {
  for (const auto& [k, v] : from) into[prefix + "." + k] = v;
}

StateDict sub_dict(const StateDict& dict, const std::string& prefix) {
  StateDict out;
  const std::string p = prefix + ".";
  for (auto it = dict.lower_bound(p); it != dict.end() && it->first.compare(0, p.size(), p) == 0; ++it) {
    out.emplace(it->first.substr(p.size()), it->second);
  }
  return out;
}

StateDict to_host(const StateDict& dict, bool copy) {
  StateDict out;
  const auto cpu = at::TensorOptions().device(at::kCPU);
  for (const auto& [name, t] : dict) {
    // to() aliases a CPU tensor whose suggested format is already contiguous even when its strides are not
    // (a transposed matrix), hence contiguous() after it (which returns a contiguous tensor itself).
    out.emplace(name, t.detach().to(cpu, /*non_blocking=*/false, copy, at::MemoryFormat::Contiguous).contiguous());
  }
  return out;
}

}  // namespace bellows
