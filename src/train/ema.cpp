// EMA of model weights with _foreach_lerp_ (one launch per device/dtype bucket), and an in-place swap for
// evaluation that restores both sides exactly.
#include "bellows/train/ema.h"

#include <ATen/ATen.h>
#include <c10/core/GradMode.h>
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <set>
#include <tuple>
#include <unordered_set>

#include "bellows/util/check.h"
#include "bellows/util/format.h"  // defines: shape_of

namespace bellows::train {
namespace {

constexpr const char* kEmaHint = "see the ema section of the configuration";

at::ScalarType ema_dtype(const at::Tensor& t, bool averaged) {
  if (!averaged) return t.scalar_type();
  return t.scalar_type() == at::kDouble ? at::kDouble : at::kFloat;
}

}  // namespace

// lerp needs one dtype: reduced-precision weights are widened (temporaries) to the EMA's dtype.
std::vector<at::Tensor> Ema::lerp_sources(const Bucket& bucket) {
  if (!bucket.widen) return bucket.live;
  std::vector<at::Tensor> widened;
  widened.reserve(bucket.live.size());
  for (const auto& t : bucket.live) widened.push_back(t.to(bucket.ema.front().scalar_type()));
  return widened;
}

Ema::Ema(const std::vector<std::pair<std::string, at::Tensor>>& tensors, EmaOptions options) : options_(options) {
  BELLOWS_CHECK_CONFIG(options_.decay >= 0 && options_.decay <= 1,
                       fmt::format("ema.decay is {}, expected in [0, 1]", options_.decay), kEmaHint);
  BELLOWS_CHECK_CONFIG(options_.every_n_steps >= 1,
                       fmt::format("ema.every_n_steps is {}, expected >= 1", options_.every_n_steps), kEmaHint);
  BELLOWS_CHECK_CONFIG(options_.start_step >= 0,
                       fmt::format("ema.start_step is {}, expected >= 0", options_.start_step), kEmaHint);
  c10::NoGradGuard no_grad;
  std::unordered_set<const void*> seen;
  std::set<std::string> names;
  for (const auto& [name, t] : tensors) {
    BELLOWS_CHECK(t.defined(), fmt::format("EMA tensor '{}' is undefined", name), "pass the model's tensors");
    if (!seen.insert(t.unsafeGetTensorImpl()).second) continue;  // tied weights: one copy, one swap
    BELLOWS_CHECK(names.insert(name).second, fmt::format("two EMA tensors are named '{}'", name),
                  "names key the EMA state, so they must be unique");
    const bool averaged = at::isFloatingType(t.scalar_type()) && t.requires_grad();
    at::Tensor copy =
        at::empty_like(t, t.options().dtype(ema_dtype(t, averaged)), at::MemoryFormat::Preserve).copy_(t.detach());
    entries_.push_back({name, t, std::move(copy), at::Tensor(), averaged});
  }
}

const at::Tensor& Ema::ema_value(const Entry& e) const {
  // While swapped, an entry of matching dtypes holds the EMA values in the live tensor (see swap()).
  return swapped_ && !e.stash.defined() ? e.live : e.ema;
}

void Ema::update(std::int64_t optimizer_step, const at::Tensor& skipped) {
  BELLOWS_CHECK(!swapped_, "Ema::update() while the EMA weights are swapped in",
                "call swap() again after evaluation, before training continues");
  c10::NoGradGuard no_grad;
  if (optimizer_step < options_.start_step) {
    for (auto& e : entries_) e.ema.copy_(e.live);
    return;
  }
  if (optimizer_step % options_.every_n_steps != 0) return;

  if (plan_.empty() && copies_.first.empty()) plan_update();
  if (!copies_.first.empty()) at::_foreach_copy_(copies_.first, copies_.second);  // buffers: copied, not averaged
  for (auto& bucket : plan_) {
    const std::vector<at::Tensor> live = lerp_sources(bucket);
    if (!skipped.defined()) {
      at::_foreach_lerp_(bucket.ema, live, 1.0 - options_.decay);
      continue;
    }
    // The weight (1 - decay) x (1 - skipped) as a device scalar: 0 on a skipped step, an exact no-op of lerp.
    const at::Tensor weight =
        (1.0 - skipped.to(bucket.ema.front().device(), bucket.ema.front().scalar_type()).reshape({})) * (1.0 - options_.decay);
    at::_foreach_lerp_(bucket.ema, live, std::vector<at::Tensor>(bucket.ema.size(), weight));
  }
  ++updates_;
}

std::string Ema::capture_unfit() const {
  if (options_.every_n_steps != 1) {
    return fmt::format("ema.every_n_steps is {}: the graph would update the EMA at every step", options_.every_n_steps);
  }
  return "";
}

void Ema::prepare_step(std::int64_t optimizer_step) {
  BELLOWS_CHECK(capture_unfit().empty() && !swapped_, "Ema::prepare_step() for an EMA that cannot be captured", "report this bug");
  if (plan_.empty() && copies_.first.empty()) plan_update();
  const bool averaging = optimizer_step >= options_.start_step;
  if (shares_.size() != plan_.size()) {
    shares_.clear();
    for (const auto& bucket : plan_) {
      const at::TensorOptions o = bucket.ema.front().options();
      shares_.emplace_back(at::zeros({}, o), at::zeros({}, o));
    }
  }
  for (auto& [copy, average] : shares_) {
    copy.fill_(averaging ? 0.0 : 1.0);
    average.fill_(averaging ? 1.0 - options_.decay : 0.0);
  }
  if (averaging) ++updates_;
}

void Ema::update_on_device(const at::Tensor& skipped) {
  c10::NoGradGuard no_grad;
  BELLOWS_CHECK(shares_.size() == plan_.size(), "Ema::update_on_device() before prepare_step()", "report this bug");
  if (!copies_.first.empty()) at::_foreach_copy_(copies_.first, copies_.second);  // buffers: copied, not averaged
  for (std::size_t i = 0; i < plan_.size(); ++i) {
    auto& bucket = plan_[i];
    const std::vector<at::Tensor> live = lerp_sources(bucket);
    const auto& [copy, average] = shares_[i];
    // update()'s weight (1 - skipped) x (1 - decay) plus the copy share: the same float32 product, plus 0 or 1.
    const at::Tensor kept = 1.0 - skipped.to(copy.device(), copy.scalar_type()).reshape({});
    const at::Tensor weight = copy + kept * average;
    at::_foreach_lerp_(bucket.ema, live, std::vector<at::Tensor>(bucket.ema.size(), weight));
  }
}

void Ema::plan_update() {
  // The averaged entries by (device, live dtype, EMA dtype): one _foreach_lerp_ per bucket; the rest, one
  // _foreach_copy_. Made once, and again after swap() replaces EMA tensors.
  using Key = std::tuple<c10::Device, at::ScalarType, at::ScalarType>;
  std::vector<Key> keys;
  plan_.clear();
  copies_ = {};
  for (auto& e : entries_) {
    if (!e.averaged) {
      copies_.first.push_back(e.ema);
      copies_.second.push_back(e.live);
      continue;
    }
    const Key key{e.live.device(), e.live.scalar_type(), e.ema.scalar_type()};
    auto it = std::find(keys.begin(), keys.end(), key);
    if (it == keys.end()) {
      keys.push_back(key);
      plan_.push_back({{}, {}, e.live.scalar_type() != e.ema.scalar_type()});
      it = std::prev(keys.end());
    }
    auto& bucket = plan_[static_cast<std::size_t>(it - keys.begin())];
    bucket.ema.push_back(e.ema);
    bucket.live.push_back(e.live);
  }
}


void Ema::swap() {
  c10::NoGradGuard no_grad;
  for (auto& e : entries_) {
    if (e.live.scalar_type() == e.ema.scalar_type()) {
      // Same dtype: a true exchange, exact both ways; the old EMA tensor is freed as its clone takes over.
      at::Tensor held_live = e.live.clone(at::MemoryFormat::Preserve);
      e.live.copy_(e.ema);
      e.ema = std::move(held_live);
    } else if (!swapped_) {
      // The live dtype is narrower: rounding the EMA into it and back would lose the EMA's precision, so the
      // live values wait aside and the EMA copy stays as it is.
      e.stash = e.live.clone(at::MemoryFormat::Preserve);
      e.live.copy_(e.ema);
    } else {
      e.live.copy_(e.stash);
      e.stash.reset();
    }
  }
  swapped_ = !swapped_;
  plan_.clear();  // the EMA tensors of same-dtype entries were replaced
  copies_ = {};
}

std::vector<std::pair<std::string, at::Tensor>> Ema::averaged() const {
  std::vector<std::pair<std::string, at::Tensor>> out;
  out.reserve(entries_.size());
  for (const auto& e : entries_) out.emplace_back(e.name, ema_value(e));
  return out;
}

StateDict Ema::state_dict() const {
  StateDict out;
  for (const auto& e : entries_) out["weights." + e.name] = ema_value(e);
  put_int(out, "updates", updates_);
  return out;
}

void Ema::load_state_dict(const StateDict& state) {
  BELLOWS_CHECK(!swapped_, "Ema::load_state_dict() while the EMA weights are swapped in",
                "call swap() again before loading");
  const char* hint = "the EMA state was saved for a different model";
  std::set<std::string> known = {"updates"};
  for (const auto& e : entries_) known.insert("weights." + e.name);
  for (const auto& [key, value] : state) {
    BELLOWS_CHECK_DATA(known.count(key) != 0, fmt::format("EMA state entry '{}' names no tensor of this model", key),
                       hint);
  }
  const std::int64_t updates = get_int(state, "updates");
  std::vector<const at::Tensor*> values;
  for (const auto& e : entries_) {
    const std::string key = "weights." + e.name;
    const at::Tensor& t = get_tensor(state, key);
    BELLOWS_CHECK_DATA(t.defined() && t.sizes() == e.ema.sizes(),
                       fmt::format("EMA state entry '{}' has shape {}, the model's tensor has shape {}", key,
                                   shape_of(t), shape_of(e.ema)),
                       hint);
    values.push_back(&t);
  }
  c10::NoGradGuard no_grad;
  for (std::size_t i = 0; i < entries_.size(); ++i) entries_[i].ema.copy_(*values[i]);
  updates_ = updates;
}

}  // namespace bellows::train
