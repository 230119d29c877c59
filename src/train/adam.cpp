// optim.type: adamw and adam -- Adam with decoupled weight decay (AdamW) or with the decay added to the gradient (L2),
// on ATen's fused kernels (_fused_adamw_, _fused_adam_) or the foreach ops with the same arithmetic.
#include <ATen/ATen.h>
#include <fmt/format.h>

#include <cmath>
#include <optional>

#include "bellows/train/optimizer_registry.h"  // defines: OptimizerEntry, OptimizerRegistrar
#include "bellows/train/update_rule.h"         // defines: UpdateRule, GroupStep
#include "bellows/util/check.h"

namespace bellows::train {
namespace {

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

class AdamRule final : public UpdateRule {
 public:
  AdamRule(const OptimizerOptions& options, bool decoupled) : o_(options), decoupled_(decoupled) {}

  std::vector<std::string> state_kinds() const override { return {"exp_avg", "exp_avg_sq"}; }

  void update(GroupStep& s) const override {
    start_moments(s);
    // The fused kernels read the incremented step; on found_inf they return before touching anything, and the
    // step goes back down on the device (as torch.optim does with a GradScaler).
    if (s.fused()) s.count_updates();
    if (s.whole_group_in_one_call()) {
      // Every parameter, one device and one dtype (the usual step): the group's own lists, no per-step bucketing.
      fused_call(s, s.group().params, s.grads(), s.state(kExpAvg), s.state(kExpAvgSq), s.steps());
    } else {
      for (const auto& idx : device_dtype_buckets(s.group().params, s.active())) update_bucket(s, idx);
    }
    if (s.fused()) s.take_back_skipped();
  }

 private:
  static constexpr std::size_t kExpAvg = 0, kExpAvgSq = 1;  // indices into state_kinds()

  // Zero moments and a step count for each parameter updated for the first time.
  static void start_moments(GroupStep& s) {
    for (std::size_t i : s.active()) {
      if (s.state(kExpAvg)[i].defined()) continue;
      const at::Tensor& p = s.group().params[i];
      s.state(kExpAvg)[i] = at::zeros_like(p, at::MemoryFormat::Preserve);
      s.state(kExpAvgSq)[i] = at::zeros_like(p, at::MemoryFormat::Preserve);
      s.start(i);
    }
  }

  void fused_call(const GroupStep& s, at::TensorList params, at::TensorList grads, at::TensorList m,
                  at::TensorList v, at::TensorList steps) const {
    const std::optional<at::Tensor> found = on_device_of(s.found_inf(), params.front());
    const double wd = s.group().weight_decay;
    s.call_with_lr([&](const auto& lr) {  // the double, or the tensor overload
      if (decoupled_) {
        at::_fused_adamw_(params, grads, m, v, {}, steps, lr, o_.beta1, o_.beta2, wd, o_.eps, /*amsgrad=*/false,
                          /*maximize=*/false, /*grad_scale=*/std::nullopt, found);
      } else {
        at::_fused_adam_(params, grads, m, v, {}, steps, lr, o_.beta1, o_.beta2, wd, o_.eps, /*amsgrad=*/false,
                         /*maximize=*/false, /*grad_scale=*/std::nullopt, found);
      }
    });
  }

  // The parameters `idx` of one device and one dtype.
  void update_bucket(GroupStep& s, const std::vector<std::size_t>& idx) const {
    auto params = pick(s.group().params, idx);
    auto grads = pick(s.grads(), idx);
    auto m = pick(s.state(kExpAvg), idx);
    auto v = pick(s.state(kExpAvgSq), idx);
    auto steps = pick(s.steps(), idx);
    if (s.fused()) {
      fused_call(s, params, grads, m, v, steps);
    } else {
      foreach_adam(std::move(params), std::move(grads), std::move(m), std::move(v), std::move(steps), s.lr(), o_.beta1,
                   o_.beta2, s.group().weight_decay, o_.eps, decoupled_);
    }
  }

  OptimizerOptions o_;
  bool decoupled_;  // adamw
};

void validate_adam(const OptimizerOptions& o) {
  BELLOWS_CHECK_CONFIG(o.beta1 >= 0 && o.beta1 < 1, fmt::format("optim.beta1 is {}, expected in [0, 1)", o.beta1),
                       kOptimizerOptionsHint);
  BELLOWS_CHECK_CONFIG(o.beta2 >= 0 && o.beta2 < 1, fmt::format("optim.beta2 is {}, expected in [0, 1)", o.beta2),
                       kOptimizerOptionsHint);
  BELLOWS_CHECK_CONFIG(std::isfinite(o.eps) && o.eps >= 0, fmt::format("optim.eps is {}, expected >= 0", o.eps),
                       kOptimizerOptionsHint);
}

OptimizerEntry adam_entry(const std::string& name, bool decoupled, int order, const std::string& help) {
  OptimizerEntry e;
  e.name = name;
  e.help = help;
  e.order = order;
  e.state_kinds = {"exp_avg", "exp_avg_sq"};
  e.validate = validate_adam;
  e.make = [decoupled](const OptimizerOptions& o) { return std::make_shared<const AdamRule>(o, decoupled); };
  return e;
}

const OptimizerRegistrar kAdamWOptimizerRegistered(
    adam_entry("adamw", /*decoupled=*/true, 0, "Adam with decoupled weight decay (Loshchilov & Hutter)"));
const OptimizerRegistrar kAdamOptimizerRegistered(
    adam_entry("adam", /*decoupled=*/false, 1, "Adam with L2 weight decay added to the gradient"));

}  // namespace
}  // namespace bellows::train
