// AdamW, Adam and SGD over whole parameter lists: ATen's fused kernels where they exist for the parameters'
// device and dtype, the _foreach_* ops otherwise. State is per parameter, created on its first update, and
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

#include "bellows/util/check.h"
#include "bellows/util/format.h"  // defines: shape_of
#include "bellows/util/suggest.h"

namespace bellows::train {
namespace {

constexpr const char* kHint = "see the optim section of the configuration";

std::string suggestion(const std::string& value, const std::vector<std::string>& valid) {
  auto best = closest_match(value, valid);
  return best ? fmt::format("did you mean '{}'? (valid: {})", *best, fmt::join(valid, ", "))
              : fmt::format("use one of: {}", fmt::join(valid, ", "));
}

void validate(const OptimizerOptions& o) {
  const std::vector<std::string> types = {"adamw", "adam", "sgd"};
  const std::vector<std::string> impls = {"auto", "fused", "foreach"};
  BELLOWS_CHECK_CONFIG(std::find(types.begin(), types.end(), o.type) != types.end(),
                       fmt::format("optim.type is '{}', an unknown optimizer", o.type), suggestion(o.type, types));
  BELLOWS_CHECK_CONFIG(std::find(impls.begin(), impls.end(), o.implementation) != impls.end(),
                       fmt::format("optim.implementation is '{}', an unknown implementation", o.implementation),
                       suggestion(o.implementation, impls));
  BELLOWS_CHECK_CONFIG(std::isfinite(o.lr) && o.lr >= 0, fmt::format("optim.lr is {}, expected >= 0", o.lr), kHint);
  BELLOWS_CHECK_CONFIG(std::isfinite(o.weight_decay) && o.weight_decay >= 0,
                       fmt::format("optim.weight_decay is {}, expected >= 0", o.weight_decay), kHint);
  if (o.type == "sgd") {
    BELLOWS_CHECK_CONFIG(std::isfinite(o.momentum) && o.momentum >= 0,
                         fmt::format("optim.momentum is {}, expected >= 0", o.momentum), kHint);
    BELLOWS_CHECK_CONFIG(o.dampening >= 0 && o.dampening <= 1,
                         fmt::format("optim.dampening is {}, expected in [0, 1]", o.dampening), kHint);
    BELLOWS_CHECK_CONFIG(
        !o.nesterov || (o.momentum > 0 && o.dampening == 0),
        fmt::format("optim.nesterov is true with optim.momentum {} and optim.dampening {}", o.momentum, o.dampening),
        "Nesterov momentum needs optim.momentum > 0 and optim.dampening = 0");
  } else {
    BELLOWS_CHECK_CONFIG(o.beta1 >= 0 && o.beta1 < 1, fmt::format("optim.beta1 is {}, expected in [0, 1)", o.beta1),
                         kHint);
    BELLOWS_CHECK_CONFIG(o.beta2 >= 0 && o.beta2 < 1, fmt::format("optim.beta2 is {}, expected in [0, 1)", o.beta2),
                         kHint);
    BELLOWS_CHECK_CONFIG(std::isfinite(o.eps) && o.eps >= 0, fmt::format("optim.eps is {}, expected >= 0", o.eps),
                         kHint);
  }
}

bool no_decay(const std::string& name, const at::Tensor& p, const std::vector<std::string>& patterns) {
  if (p.dim() <= 1) return true;
  return std::any_of(patterns.begin(), patterns.end(),
                     [&](const std::string& pat) { return !pat.empty() && name.find(pat) != std::string::npos; });
}

// Indices of `active` grouped by (device, dtype): the fused kernels and the foreach fast paths want one
// device and one dtype per call. Few buckets, so a linear search.
std::vector<std::vector<std::size_t>> buckets(const std::vector<at::Tensor>& params,
                                              const std::vector<std::size_t>& active) {
  std::vector<std::pair<std::pair<c10::Device, at::ScalarType>, std::vector<std::size_t>>> out;
  for (std::size_t i : active) {
    const auto key = std::make_pair(params[i].device(), params[i].scalar_type());
    auto it = std::find_if(out.begin(), out.end(), [&](const auto& b) { return b.first == key; });
    if (it == out.end()) {
      out.push_back({key, {}});
      it = std::prev(out.end());
    }
    it->second.push_back(i);
  }
  std::vector<std::vector<std::size_t>> result;
  for (auto& b : out) result.push_back(std::move(b.second));
  return result;
}

std::vector<at::Tensor> pick(const std::vector<at::Tensor>& from, const std::vector<std::size_t>& idx) {
  std::vector<at::Tensor> out;
  out.reserve(idx.size());
  for (std::size_t i : idx) out.push_back(from[i]);
  return out;
}

// Adam/AdamW on foreach ops, the same arithmetic as the fused kernels (and PyTorch's multi-tensor path).
void foreach_adam(std::vector<at::Tensor> params, std::vector<at::Tensor> grads, std::vector<at::Tensor> m,
                  std::vector<at::Tensor> v, std::vector<at::Tensor> steps, double lr, double beta1, double beta2,
                  double weight_decay, double eps, bool decoupled) {
  at::_foreach_add_(steps, 1);
  if (weight_decay != 0) {
    if (decoupled) {
      at::_foreach_mul_(params, 1 - lr * weight_decay);
    } else {
      grads = at::_foreach_add(grads, params, weight_decay);
    }
  }
  at::_foreach_lerp_(m, grads, 1 - beta1);
  at::_foreach_mul_(v, beta2);
  at::_foreach_addcmul_(v, grads, grads, 1 - beta2);
  std::vector<at::Scalar> bc2_sqrt, neg_step_size;
  for (const auto& s : steps) {
    const double step = s.item<double>();  // CPU tensors on this path: no device sync
    bc2_sqrt.emplace_back(std::sqrt(1 - std::pow(beta2, step)));
    neg_step_size.emplace_back(-lr / (1 - std::pow(beta1, step)));
  }
  auto denom = at::_foreach_sqrt(v);
  at::_foreach_div_(denom, bc2_sqrt);
  at::_foreach_add_(denom, eps);
  at::_foreach_addcdiv_(params, m, denom, neg_step_size);
}

// found_inf where the kernel runs (a no-op when it is there already); none when not given.
std::optional<at::Tensor> on_device_of(const at::Tensor& found_inf, const at::Tensor& param) {
  if (!found_inf.defined()) return std::nullopt;
  return found_inf.to(param.device(), /*non_blocking=*/true);
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
  validate(options_);
  adam_ = options_.type != "sgd";
  decoupled_ = options_.type == "adamw";
  groups_ = param_groups(params, options_);

  fused_ = options_.implementation == "fused";
  if (options_.implementation == "auto") {
    fused_ = std::all_of(groups_.begin(), groups_.end(), [](const ParamGroup& g) {
      return std::all_of(g.params.begin(), g.params.end(), fused_kernel_available);
    });
  }
  for (auto* state : {&exp_avg_, &exp_avg_sq_, &momentum_buffer_, &state_steps_}) {
    state->resize(groups_.size());
    for (std::size_t g = 0; g < groups_.size(); ++g) (*state)[g].resize(groups_[g].params.size());
  }
  step_buffers_ = new_step_buffers();
  for (const auto& g : groups_) {
    uniform_dtype_.push_back(std::all_of(g.params.begin(), g.params.end(),
                                         [&](const at::Tensor& p) { return p.scalar_type() == g.params.front().scalar_type(); }));
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
  for (const auto& idx : buckets(groups_[g].params, active)) {
    const std::vector<at::Tensor> steps = pick(state_steps_[g], idx);
    if (!take_back) at::_foreach_add_(steps, 1);
    else if (const auto found = on_device_of(found_inf, steps.front())) at::_foreach_add_(steps, *found, /*alpha=*/-1);
  }
}

std::int64_t Optimizer::state_bytes() const {
  std::int64_t bytes = 0;
  for (const auto* kind : {&exp_avg_, &exp_avg_sq_, &momentum_buffer_, &state_steps_}) {
    for (const auto& group : *kind) {
      for (const at::Tensor& t : group) {
        if (t.defined()) bytes += static_cast<std::int64_t>(t.nbytes());
      }
    }
  }
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
    const bool first_momentum_step = !adam_ && options_.momentum != 0 && options_.dampening != 0 && has_new_parameter();
    if (!fused_ || first_momentum_step) {
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
      for (auto* state : {&exp_avg_, &exp_avg_sq_, &momentum_buffer_, &state_steps_}) (*state)[g][i] = at::Tensor();
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

void Optimizer::update(const at::Tensor& found_inf) {
  for (std::size_t g = 0; g < groups_.size(); ++g) {
    const auto& group = groups_[g];
    std::vector<std::size_t> active;
    std::vector<at::Tensor> grads(group.params.size());
    for (std::size_t i = 0; i < group.params.size(); ++i) {
      const at::Tensor& p = group.params[i];
      at::Tensor grad = p.grad();
      if (!grad.defined()) continue;  // no gradient this step: skipped, as PyTorch does
      BELLOWS_CHECK_CONFIG(grad.layout() == at::kStrided,
                           fmt::format("parameter '{}' has a sparse gradient", group.names[i]),
                           "the optimizers here need dense gradients (e.g. an embedding with sparse=false)");
      BELLOWS_CHECK(grad.device() == p.device(),
                    fmt::format("gradient of '{}' is on {}, the parameter on {}", group.names[i], grad.device().str(),
                                p.device().str()),
                    "gradients must live with their parameters");
      // The fused kernels walk param, grad and state as one flat array: same dtype and the same layout, strides
      // compared where a dimension has more than one element, as ATen's fast-path check does (a 1x1 convolution's
      // channels_last weight and its contiguous gradient lie alike in memory: no copy every step).
      if (grad.scalar_type() != p.scalar_type() || !same_dense_layout(grad, p)) grad = at::empty_like(p).copy_(grad);
      grads[i] = std::move(grad);
      active.push_back(i);
    }
    if (active.empty()) continue;
    if (adam_) {
      step_adam(g, active, grads, found_inf);
    } else {
      step_sgd(g, active, grads, found_inf);
    }
  }
}

void Optimizer::step_adam(std::size_t g, const std::vector<std::size_t>& active, const std::vector<at::Tensor>& grads,
                          const at::Tensor& found_inf) {
  const auto& group = groups_[g];
  for (std::size_t i : active) {
    if (!exp_avg_[g][i].defined()) {
      const at::Tensor& p = group.params[i];
      exp_avg_[g][i] = at::zeros_like(p, at::MemoryFormat::Preserve);
      exp_avg_sq_[g][i] = at::zeros_like(p, at::MemoryFormat::Preserve);
      state_steps_[g][i] = new_step_tensor(step_buffers_, g, i);
    }
  }
  const auto& o = options_;
  // The fused kernels read the incremented step; on found_inf they return before touching anything, and the
  // step goes back down on the device (as torch.optim does with a GradScaler).
  if (fused_) count_updates(g, active, found_inf, /*take_back=*/false);
  const auto fused_call = [&](at::TensorList params, at::TensorList grad_list, at::TensorList m, at::TensorList v, at::TensorList steps) {
    const std::optional<at::Tensor> found = on_device_of(found_inf, params.front());
    const auto call = [&](const auto& lr) {  // the double, or the tensor overload
      if (decoupled_) {
        at::_fused_adamw_(params, grad_list, m, v, {}, steps, lr, o.beta1, o.beta2, group.weight_decay, o.eps,
                          /*amsgrad=*/false, /*maximize=*/false, /*grad_scale=*/std::nullopt, found);
      } else {
        at::_fused_adam_(params, grad_list, m, v, {}, steps, lr, o.beta1, o.beta2, group.weight_decay, o.eps,
                         /*amsgrad=*/false, /*maximize=*/false, /*grad_scale=*/std::nullopt, found);
      }
    };
    // The learning rate as a device tensor when the step is a CUDA graph (use_lr_tensor), else a number.
    if (lr_tensor_.defined()) {
      call(lr_tensor_);
    } else {
      call(lr_);
    }
  };
  if (fused_ && step_buffers_[g].defined() && uniform_dtype_[g] && active.size() == group.params.size()) {
    // Every parameter, one device and one dtype (the usual step): the group's own lists, no per-step bucketing.
    fused_call(group.params, grads, exp_avg_[g], exp_avg_sq_[g], state_steps_[g]);
  } else {
    for (const auto& idx : buckets(group.params, active)) {
      auto params = pick(group.params, idx);
      auto grad_list = pick(grads, idx);
      auto m = pick(exp_avg_[g], idx);
      auto v = pick(exp_avg_sq_[g], idx);
      auto steps = pick(state_steps_[g], idx);
      if (fused_) {
        fused_call(params, grad_list, m, v, steps);
      } else {
        foreach_adam(std::move(params), std::move(grad_list), std::move(m), std::move(v), std::move(steps), lr_, o.beta1,
                     o.beta2, group.weight_decay, o.eps, decoupled_);
      }
    }
  }
  if (fused_) count_updates(g, active, found_inf, /*take_back=*/true);
}

void Optimizer::step_sgd(std::size_t g, const std::vector<std::size_t>& active, const std::vector<at::Tensor>& grads,
                         const at::Tensor& found_inf) {
  const auto& group = groups_[g];
  const auto& o = options_;
  const double wd = group.weight_decay;
  const bool with_momentum = o.momentum != 0;
  // Parameters updated for the first time start their momentum buffer at the gradient (no dampening), which
  // the fused kernel does only for a whole call: first-timers and the others go in separate calls.
  std::vector<std::size_t> first, later;
  for (std::size_t i : active) {
    if (!state_steps_[g][i].defined()) {
      state_steps_[g][i] = new_step_tensor(step_buffers_, g, i);
      first.push_back(i);
    } else {
      later.push_back(i);
    }
  }
  // How many updates each parameter had: on the CPU, or with the fused kernel on its device, where a skipped
  // update (found_inf) takes the count back down without a sync.
  std::optional<at::Tensor> found;
  if (fused_) found = on_device_of(found_inf, group.params[active.front()]);
  count_updates(g, active, {}, /*take_back=*/false);
  if (fused_) count_updates(g, active, found_inf, /*take_back=*/true);

  for (const auto* subset : {&first, &later}) {
    const bool is_first = subset == &first;
    for (const auto& idx : buckets(group.params, *subset)) {
      auto params = pick(group.params, idx);
      auto grad_list = pick(grads, idx);
      if (fused_) {
        if (with_momentum && is_first) {
          // Zero, not empty: when found_inf skips this update the buffer stays zero, and with dampening 0 the next
          // update (is_first_step false) makes it the gradient, as a first update would (step() reads found_inf
          // on the host when dampening is not 0).
          for (std::size_t i : idx)
            momentum_buffer_[g][i] = at::zeros_like(group.params[i], at::MemoryFormat::Preserve);
        }
        const auto bufs = with_momentum ? pick(momentum_buffer_[g], idx) : std::vector<at::Tensor>{};
        const auto call = [&](const auto& lr) {  // the double, or the tensor overload (use_lr_tensor)
          at::_fused_sgd_(params, grad_list, bufs, wd, o.momentum, lr, o.dampening, o.nesterov, /*maximize=*/false,
                          /*is_first_step=*/with_momentum && is_first, /*grad_scale=*/std::nullopt, found);
        };
        if (lr_tensor_.defined()) {
          call(lr_tensor_);
        } else {
          call(lr_);
        }
        continue;
      }
      if (wd != 0) grad_list = at::_foreach_add(grad_list, params, wd);
      if (with_momentum) {
        if (is_first) {
          for (std::size_t k = 0; k < idx.size(); ++k) {
            momentum_buffer_[g][idx[k]] = grad_list[k].clone(at::MemoryFormat::Preserve);
          }
        }
        auto bufs = pick(momentum_buffer_[g], idx);
        if (!is_first) {
          at::_foreach_mul_(bufs, o.momentum);
          at::_foreach_add_(bufs, grad_list, 1 - o.dampening);
        }
        grad_list = o.nesterov ? at::_foreach_add(grad_list, bufs, o.momentum) : bufs;
      }
      at::_foreach_add_(params, grad_list, -lr_);
    }
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
      if (adam_) {
        out["exp_avg." + name] = exp_avg_[g][i];
        out["exp_avg_sq." + name] = exp_avg_sq_[g][i];
      } else if (options_.momentum != 0) {
        out["momentum_buffer." + name] = momentum_buffer_[g][i];
      }
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

void Optimizer::load_state_dict(const StateDict& state) {
  c10::NoGradGuard no_grad;
  const char* hint = "the state was saved by a different model, optimizer type or freeze setting";
  std::set<std::string> known = {"lr", "steps"};
  for (const auto& group : groups_) {
    for (const auto& name : group.names) {
      for (const char* kind : {"step.", "exp_avg.", "exp_avg_sq.", "momentum_buffer."}) known.insert(kind + name);
    }
  }
  for (const auto& [key, value] : state) {
    BELLOWS_CHECK_DATA(known.count(key) != 0,
                       fmt::format("optimizer state entry '{}' belongs to no trainable parameter of this {} optimizer",
                                   key, options_.type),
                       hint);
  }
  const double lr = get_double(state, "lr");
  const std::int64_t steps = get_int(state, "steps");

  // Build everything first, so that an error leaves this optimizer as it was.
  auto exp_avg = exp_avg_, exp_avg_sq = exp_avg_sq_, momentum_buffer = momentum_buffer_, state_steps = state_steps_;
  std::vector<at::Tensor> step_buffers = new_step_buffers();
  auto load_like = [&](const std::string& key, const at::Tensor& p) {
    const at::Tensor& t = get_tensor(state, key);
    BELLOWS_CHECK_DATA(t.defined() && t.sizes() == p.sizes(),
                       fmt::format("optimizer state entry '{}' has shape {}, the parameter has shape {}", key,
                                   t.defined() ? shape_of(t) : "(undefined)", shape_of(p)),
                       hint);
    return at::empty_like(p, at::MemoryFormat::Preserve).copy_(t);  // onto the parameter's device, dtype, layout
  };
  for (std::size_t g = 0; g < groups_.size(); ++g) {
    for (std::size_t i = 0; i < groups_[g].params.size(); ++i) {
      const std::string& name = groups_[g].names[i];
      const at::Tensor& p = groups_[g].params[i];
      const at::Tensor& step = get_tensor(state, "step." + name);
      BELLOWS_CHECK_DATA(step.defined() && step.numel() == 1,
                         fmt::format("optimizer state entry 'step.{}' is not a scalar", name), hint);
      exp_avg[g][i] = exp_avg_sq[g][i] = momentum_buffer[g][i] = state_steps[g][i] = at::Tensor();
      if (step.item<double>() == 0) continue;  // never updated: no state
      state_steps[g][i] = new_step_tensor(step_buffers, g, i).copy_(step.reshape({}));
      if (adam_) {
        exp_avg[g][i] = load_like("exp_avg." + name, p);
        exp_avg_sq[g][i] = load_like("exp_avg_sq." + name, p);
      } else if (options_.momentum != 0) {
        momentum_buffer[g][i] = load_like("momentum_buffer." + name, p);
      }
    }
  }
  exp_avg_ = std::move(exp_avg);
  exp_avg_sq_ = std::move(exp_avg_sq);
  momentum_buffer_ = std::move(momentum_buffer);
  state_steps_ = std::move(state_steps);
  step_buffers_ = std::move(step_buffers);
  set_lr(lr);
  step_count_ = steps;
}

}  // namespace bellows::train
