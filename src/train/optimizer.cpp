// What every optimizer shares: parameter groups, the learning rate, step counts, the choice of ATen's fused kernels
// where they exist for the parameters' device and dtype (the _foreach_* ops otherwise), and the per-parameter state of
// the algorithm (train/update_rule.h; AdamW, Adam and SGD in adam.cpp and sgd.cpp), created on its first update and
// keyed by parameter name in the state dict so that checkpoints survive a change of device or of kernel.
#include "bellows/train/optimizer.h"

#include <ATen/ATen.h>
#include <c10/core/GradMode.h>
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cmath>
#include <optional>
#include <set>
#include <unordered_set>

#include "bellows/train/optimizer_registry.h"  // defines: find_optimizer, optimizer_entries
#include "bellows/train/update_rule.h"         // defines: UpdateRule, GroupStep, device_dtype_buckets, pick
#include "bellows/util/check.h"
#include "bellows/util/format.h"  // defines: shape_of
#include "bellows/util/suggest.h"

namespace bellows::train {
namespace {

std::string suggestion(const std::string& value, const std::vector<std::string>& valid) {
  auto best = closest_match(value, valid);
  return best ? fmt::format("did you mean '{}'? (valid: {})", *best, fmt::join(valid, ", "))
              : fmt::format("use one of: {}", fmt::join(valid, ", "));
}

// The common checks, then the entry's own; returns the entry of o.type.
const OptimizerEntry& validated_entry(const OptimizerOptions& o) {
  const OptimizerEntry& entry = find_optimizer(o.type);
  const std::vector<std::string> impls = {"auto", "fused", "foreach"};
  BELLOWS_CHECK_CONFIG(std::find(impls.begin(), impls.end(), o.implementation) != impls.end(),
                       fmt::format("optim.implementation is '{}', an unknown implementation", o.implementation),
                       suggestion(o.implementation, impls));
  BELLOWS_CHECK_CONFIG(entry.fused_kernels || o.implementation != "fused",
                       fmt::format("optim.implementation is 'fused' but optimizer '{}' has no fused kernels", o.type),
                       "set optim.implementation to auto or foreach");
  BELLOWS_CHECK_CONFIG(std::isfinite(o.lr) && o.lr >= 0, fmt::format("optim.lr is {}, expected >= 0", o.lr),
                       kOptimizerOptionsHint);
  BELLOWS_CHECK_CONFIG(std::isfinite(o.weight_decay) && o.weight_decay >= 0,
                       fmt::format("optim.weight_decay is {}, expected >= 0", o.weight_decay), kOptimizerOptionsHint);
  if (entry.validate) entry.validate(o);
  return entry;
}

bool no_decay(const std::string& name, const at::Tensor& p, const std::vector<std::string>& patterns) {
  if (p.dim() <= 1) return true;
  return std::any_of(patterns.begin(), patterns.end(),
                     [&](const std::string& pat) { return !pat.empty() && name.find(pat) != std::string::npos; });
}

}  // namespace

bool fused_kernel_available(const at::Tensor& param) {
  const auto dev = param.device().type();
  const auto dt = param.scalar_type();
  return (dev == c10::DeviceType::CPU || dev == c10::DeviceType::CUDA) &&
         (dt == at::kFloat || dt == at::kDouble || dt == at::kHalf || dt == at::kBFloat16) &&
         param.layout() == at::kStrided && param.is_non_overlapping_and_dense();
}

std::vector<ParamGroup> param_groups(const NamedParameters& params, const OptimizerOptions& options) {
  ParamGroup decay{"decay", {}, {}, options.weight_decay};
  ParamGroup plain{"no_decay", {}, {}, 0.0};
  std::unordered_set<const void*> seen_tensors;
  std::set<std::string> seen_names;
  std::size_t frozen = 0;
  for (const auto& [name, p] : params) {
    BELLOWS_CHECK(p.defined(), fmt::format("parameter '{}' is an undefined tensor", name),
                  "pass the model's parameters");
    if (!p.requires_grad()) {
      ++frozen;
      continue;
    }
    if (!seen_tensors.insert(p.unsafeGetTensorImpl()).second) continue;  // tied weights: update once
    BELLOWS_CHECK(seen_names.insert(name).second, fmt::format("two parameters are named '{}'", name),
                  "parameter names key the optimizer state, so they must be unique");
    BELLOWS_CHECK_CONFIG(at::isFloatingType(p.scalar_type()),
                         fmt::format("parameter '{}' has dtype {}, the optimizer needs floating point", name,
                                     c10::toString(p.scalar_type())),
                         "freeze it (train.freeze) or make it a buffer");
    if (options.implementation == "fused") {
      BELLOWS_CHECK_CONFIG(
          fused_kernel_available(p),
          fmt::format("optim.implementation is 'fused' but parameter '{}' ({} {} on {}) has no fused "
                      "{} kernel",
                      name, c10::toString(p.scalar_type()), shape_of(p), p.device().str(), options.type),
          "set optim.implementation to auto or foreach (fused kernels: CPU and CUDA; float32, "
          "float64, float16, bfloat16; dense tensors)");
    }
    ParamGroup& group = no_decay(name, p, options.no_decay_patterns) ? plain : decay;
    group.names.push_back(name);
    group.params.push_back(p);
  }
  BELLOWS_CHECK_CONFIG(
      !seen_tensors.empty(),
      fmt::format("the optimizer has no trainable parameter ({} given, {} frozen)", params.size(), frozen),
      "check train.freeze: at least one parameter must require gradients");
  std::vector<ParamGroup> groups;
  for (auto* g : {&decay, &plain}) {
    if (!g->params.empty()) groups.push_back(std::move(*g));
  }
  return groups;
}

NamedParameters trainable_parameters(const NamedParameters& params, const OptimizerOptions& options) {
  NamedParameters out;
  for (const ParamGroup& g : param_groups(params, options)) {
    for (std::size_t i = 0; i < g.params.size(); ++i) out.emplace_back(g.names[i], g.params[i]);
  }
  return out;
}

Optimizer::Optimizer(const NamedParameters& params, OptimizerOptions options)
    : options_(std::move(options)), lr_(options_.lr) {
  const OptimizerEntry& entry = validated_entry(options_);
  rule_ = entry.make(options_);
  kinds_ = rule_->state_kinds();
  groups_ = param_groups(params, options_);

  fused_ = options_.implementation == "fused";
  if (options_.implementation == "auto") {
    fused_ = entry.fused_kernels && std::all_of(groups_.begin(), groups_.end(), [](const ParamGroup& g) {
      return std::all_of(g.params.begin(), g.params.end(), fused_kernel_available);
    });
  }
  allocate_state();
  step_buffers_ = new_step_buffers();
  for (const auto& g : groups_) {
    uniform_dtype_.push_back(std::all_of(g.params.begin(), g.params.end(),
                                         [&](const at::Tensor& p) { return p.scalar_type() == g.params.front().scalar_type(); }));
  }
}

void Optimizer::allocate_state() {
  state_.resize(kinds_.size());
  std::vector<std::vector<std::vector<at::Tensor>>*> all = {&state_steps_};
  for (auto& kind : state_) all.push_back(&kind);
  for (auto* state : all) {
    state->resize(groups_.size());
    for (std::size_t g = 0; g < groups_.size(); ++g) (*state)[g].resize(groups_[g].params.size());
  }
}

std::vector<at::Tensor> Optimizer::new_step_buffers() const {
  std::vector<at::Tensor> buffers(groups_.size());
  if (!fused_) return buffers;  // the foreach path reads its steps on the host, one by one
  for (std::size_t g = 0; g < groups_.size(); ++g) {
    const auto& params = groups_[g].params;
    const c10::Device device = params.front().device();
    if (std::all_of(params.begin(), params.end(), [&](const at::Tensor& p) { return p.device() == device; })) {
      buffers[g] = at::zeros({static_cast<std::int64_t>(params.size())}, at::TensorOptions().dtype(at::kFloat).device(device));
    }
  }
  return buffers;
}

void Optimizer::count_updates(std::size_t g, const std::vector<std::size_t>& active, const at::Tensor& found_inf, bool take_back) {
  if (step_buffers_[g].defined() && active.size() == groups_[g].params.size()) {
    // Every parameter of the group: one op on the group's buffer instead of one per parameter.
    if (!take_back) step_buffers_[g].add_(1);
    else if (const auto found = on_device_of(found_inf, step_buffers_[g])) step_buffers_[g].sub_(*found);
    return;
  }
  for (const auto& idx : device_dtype_buckets(groups_[g].params, active)) {
    const std::vector<at::Tensor> steps = pick(state_steps_[g], idx);
    if (!take_back) at::_foreach_add_(steps, 1);
    else if (const auto found = on_device_of(found_inf, steps.front())) at::_foreach_add_(steps, *found, /*alpha=*/-1);
  }
}

std::int64_t Optimizer::state_bytes() const {
  std::int64_t bytes = 0;
  const auto add = [&](const std::vector<std::vector<at::Tensor>>& kind) {
    for (const auto& group : kind) {
      for (const at::Tensor& t : group) {
        if (t.defined()) bytes += static_cast<std::int64_t>(t.nbytes());
      }
    }
  };
  for (const auto& kind : state_) add(kind);
  add(state_steps_);
  return bytes;
}

std::vector<at::Tensor> Optimizer::parameters() const {
  std::vector<at::Tensor> out;
  for (const auto& g : groups_) out.insert(out.end(), g.params.begin(), g.params.end());
  return out;
}

at::Tensor Optimizer::new_step_tensor(const std::vector<at::Tensor>& buffers, std::size_t g, std::size_t i) const {
  // The fused kernels' steps live on the parameter's device (Adam reads them there; a skipped update takes them
  // back down there), as slots of the group's buffer when it has one; the foreach path reads them on the host.
  if (buffers[g].defined()) return buffers[g].select(0, static_cast<std::int64_t>(i));
  const c10::Device device = fused_ ? groups_[g].params[i].device() : c10::Device(c10::kCPU);
  return at::zeros({}, at::TensorOptions().dtype(at::kFloat).device(device));
}

void Optimizer::set_lr(double lr) {
  lr_ = lr;
  if (lr_tensor_.defined()) lr_tensor_.fill_(lr);  // outside a captured step: the replay reads it
}

void Optimizer::use_lr_tensor(c10::Device device) {
  BELLOWS_CHECK_CONFIG(fused_, "a learning rate on the device needs the fused optimizer kernels",
                       "set optimizer.implementation: fused (or auto where every parameter has a fused kernel)");
  if (!lr_tensor_.defined()) lr_tensor_ = at::full({}, lr_, at::TensorOptions().dtype(at::kFloat).device(device));
}

void clear_gradients(const std::vector<at::Tensor>& params) {
  for (const at::Tensor& p : params) {
    at::Tensor t = p;
    t.mutable_grad().reset();
  }
}

void Optimizer::zero_grad() { clear_gradients(parameters()); }

void Optimizer::step(const at::Tensor& found_inf) {
  c10::NoGradGuard no_grad;
  ++step_count_;
  if (found_inf.defined()) {
    BELLOWS_CHECK(found_inf.numel() == 1 && found_inf.scalar_type() == at::kFloat,
                  fmt::format("found_inf is {} {}, expected a float32 scalar", c10::toString(found_inf.scalar_type()), shape_of(found_inf)),
                  "pass GradScaler's found_inf (1: skip the update)");
    // Without fused kernels nothing can skip on the device: read the flag (one sync). So does SGD with momentum and
    // dampening on a step where a parameter with a gradient has no buffer yet: its buffer starts as the gradient
    // only on an update that happens (with dampening 0 a zero buffer gives the same first update: no read).
    if (!fused_ || (rule_->first_update_reads_found_inf() && has_new_parameter())) {
      if (found_inf.item<float>() != 0) return;
      update({});
      return;
    }
  }
  update(found_inf);
}

bool Optimizer::has_new_parameter() const {
  for (std::size_t g = 0; g < groups_.size(); ++g) {
    for (std::size_t i = 0; i < groups_[g].params.size(); ++i) {
      if (!state_steps_[g][i].defined() && groups_[g].params[i].grad().defined()) return true;
    }
  }
  return false;
}

Optimizer::StateMark Optimizer::state_mark() const {
  StateMark mark(groups_.size());
  for (std::size_t g = 0; g < groups_.size(); ++g) {
    for (const auto& t : state_steps_[g]) mark[g].push_back(t.defined());
  }
  return mark;
}

void Optimizer::drop_state_since(const StateMark& mark) {
  BELLOWS_CHECK(mark.size() == groups_.size(), "drop_state_since() with a mark of another optimizer", "report this bug");
  for (std::size_t g = 0; g < groups_.size(); ++g) {
    for (std::size_t i = 0; i < groups_[g].params.size(); ++i) {
      if (mark[g][i]) continue;
      for (auto& kind : state_) kind[g][i] = at::Tensor();
      state_steps_[g][i] = at::Tensor();
    }
  }
}

namespace {
bool same_dense_layout(const at::Tensor& a, const at::Tensor& b) {
  if (a.sizes() != b.sizes() || !a.is_non_overlapping_and_dense() || !b.is_non_overlapping_and_dense()) return false;
  for (std::int64_t d = 0; d < a.dim(); ++d) {
    if (a.size(d) != 1 && a.stride(d) != b.stride(d)) return false;
  }
  return true;
}
}  // namespace

at::Tensor Optimizer::kernel_gradient(std::size_t g, std::size_t i) const {
  const auto& group = groups_[g];
  const at::Tensor& p = group.params[i];
  at::Tensor grad = p.grad();
  if (!grad.defined()) return grad;  // no gradient this step: skipped, as PyTorch does
  BELLOWS_CHECK_CONFIG(grad.layout() == at::kStrided, fmt::format("parameter '{}' has a sparse gradient", group.names[i]),
                       "the optimizers here need dense gradients (e.g. an embedding with sparse=false)");
  BELLOWS_CHECK(grad.device() == p.device(),
                fmt::format("gradient of '{}' is on {}, the parameter on {}", group.names[i], grad.device().str(),
                            p.device().str()),
                "gradients must live with their parameters");
  // The fused kernels walk param, grad and state as one flat array: same dtype and the same layout, strides
  // compared where a dimension has more than one element, as ATen's fast-path check does (a 1x1 convolution's
  // channels_last weight and its contiguous gradient lie alike in memory: no copy every step).
  if (grad.scalar_type() != p.scalar_type() || !same_dense_layout(grad, p)) grad = at::empty_like(p).copy_(grad);
  return grad;
}

void Optimizer::update(const at::Tensor& found_inf) {
  for (std::size_t g = 0; g < groups_.size(); ++g) {
    GroupStep step(*this, g, found_inf);
    if (!step.active().empty()) rule_->update(step);
  }
}

StateDict Optimizer::state_dict() const {
  StateDict out;
  put_double(out, "lr", lr_);
  put_int(out, "steps", step_count_);
  for (std::size_t g = 0; g < groups_.size(); ++g) {
    for (std::size_t i = 0; i < groups_[g].params.size(); ++i) {
      const std::string& name = groups_[g].names[i];
      const at::Tensor& step = state_steps_[g][i];
      out["step." + name] = step.defined() ? step : at::zeros({}, at::TensorOptions().dtype(at::kFloat));
      if (!step.defined()) continue;
      for (std::size_t k = 0; k < kinds_.size(); ++k) out[kinds_[k] + "." + name] = state_[k][g][i];
    }
  }
  return out;
}

StateDict Optimizer::own_entries(const StateDict& state) const {
  std::set<std::string> names;
  for (const auto& group : groups_) names.insert(group.names.begin(), group.names.end());
  StateDict out;
  for (const auto& [key, value] : state) {
    const auto dot = key.find('.');
    if (dot == std::string::npos || names.count(key.substr(dot + 1)) != 0) out.emplace(key, value);
  }
  return out;
}

namespace {
constexpr const char* kOptimizerLoadHint = "the state was saved by a different model, optimizer type or freeze setting";

// kData error for an entry that is none of "lr", "steps", and per parameter its step and each kind of state that any
// registered optimizer keeps (another optimizer's moments are ignored where this one's steps fit).
void check_optimizer_entries_known(const StateDict& state, const std::vector<ParamGroup>& groups,
                                   const std::string& type) {
  std::vector<std::string> prefixes = {"step."};
  for (const auto& entry : optimizer_entries()) {
    for (const auto& kind : entry.state_kinds) prefixes.push_back(kind + ".");
  }
  std::set<std::string> known = {"lr", "steps"};
  for (const auto& group : groups) {
    for (const auto& name : group.names) {
      for (const auto& prefix : prefixes) known.insert(prefix + name);
    }
  }
  for (const auto& [key, value] : state) {
    BELLOWS_CHECK_DATA(known.count(key) != 0,
                       fmt::format("optimizer state entry '{}' belongs to no trainable parameter of this {} optimizer",
                                   key, type),
                       kOptimizerLoadHint);
  }
}

// The entry `key` copied onto the parameter's device, dtype and layout; kData error where it is missing or of
// another shape.
at::Tensor load_optimizer_state_like(const StateDict& state, const std::string& key, const at::Tensor& p) {
  const at::Tensor& t = get_tensor(state, key);
  BELLOWS_CHECK_DATA(t.defined() && t.sizes() == p.sizes(),
                     fmt::format("optimizer state entry '{}' has shape {}, the parameter has shape {}", key,
                                 t.defined() ? shape_of(t) : "(undefined)", shape_of(p)),
                     kOptimizerLoadHint);
  return at::empty_like(p, at::MemoryFormat::Preserve).copy_(t);
}
}  // namespace

void Optimizer::load_state_dict(const StateDict& state) {
  c10::NoGradGuard no_grad;
  check_optimizer_entries_known(state, groups_, options_.type);
  const double lr = get_double(state, "lr");
  const std::int64_t steps = get_int(state, "steps");

  // Build everything first, so that an error leaves this optimizer as it was.
  auto kind_state = state_;
  auto state_steps = state_steps_;
  std::vector<at::Tensor> step_buffers = new_step_buffers();
  for (std::size_t g = 0; g < groups_.size(); ++g) {
    for (std::size_t i = 0; i < groups_[g].params.size(); ++i) {
      const std::string& name = groups_[g].names[i];
      const at::Tensor& step = get_tensor(state, "step." + name);
      BELLOWS_CHECK_DATA(step.defined() && step.numel() == 1,
                         fmt::format("optimizer state entry 'step.{}' is not a scalar", name), kOptimizerLoadHint);
      for (auto& kind : kind_state) kind[g][i] = at::Tensor();
      state_steps[g][i] = at::Tensor();
      if (step.item<double>() == 0) continue;  // never updated: no state
      state_steps[g][i] = new_step_tensor(step_buffers, g, i).copy_(step.reshape({}));
      for (std::size_t k = 0; k < kinds_.size(); ++k) {
        kind_state[k][g][i] = load_optimizer_state_like(state, kinds_[k] + "." + name, groups_[g].params[i]);
      }
    }
  }
  state_ = std::move(kind_state);
  state_steps_ = std::move(state_steps);
  step_buffers_ = std::move(step_buffers);
  set_lr(lr);
  step_count_ = steps;
}

}  // namespace bellows::train
