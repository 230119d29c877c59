// optim.type: sgd -- SGD with optional momentum (dampening, Nesterov) and L2 weight decay, PyTorch's conventions, on
// ATen's fused kernel (_fused_sgd_) or the foreach ops.
#include <ATen/ATen.h>
#include <fmt/format.h>

#include <cmath>
#include <optional>

#include "bellows/train/optimizer_registry.h"  // defines: OptimizerEntry, OptimizerRegistrar
#include "bellows/train/update_rule.h"         // defines: UpdateRule, GroupStep
#include "bellows/util/check.h"

namespace bellows::train {
namespace {

class SgdRule final : public UpdateRule {
 public:
  explicit SgdRule(const OptimizerOptions& options) : o_(options) {}

  std::vector<std::string> state_kinds() const override {
    if (with_momentum()) return {"momentum_buffer"};
    return {};
  }
  // With dampening a new buffer starts as the gradient only on an update that happens (with dampening 0 a zero
  // buffer gives the same first update: no read).
  bool first_update_reads_found_inf() const override { return with_momentum() && o_.dampening != 0; }

  void update(GroupStep& s) const override {
    // Parameters updated for the first time start their momentum buffer at the gradient (no dampening), which
    // the fused kernel does only for a whole call: first-timers and the others go in separate calls.
    std::vector<std::size_t> first, later;
    for (std::size_t i : s.active()) {
      if (!s.started(i)) {
        s.start(i);
        first.push_back(i);
      } else {
        later.push_back(i);
      }
    }
    // How many updates each parameter had: on the CPU, or with the fused kernel on its device, where a skipped
    // update (found_inf) takes the count back down without a sync.
    std::optional<at::Tensor> found;
    if (s.fused()) found = on_device_of(s.found_inf(), s.group().params[s.active().front()]);
    s.count_updates();
    if (s.fused()) s.take_back_skipped();

    for (const auto* subset : {&first, &later}) {
      const bool is_first = subset == &first;
      for (const auto& idx : device_dtype_buckets(s.group().params, *subset)) {
        if (s.fused()) {
          fused_bucket(s, idx, is_first, found);
        } else {
          foreach_bucket(s, idx, is_first);
        }
      }
    }
  }

 private:
  static constexpr std::size_t kMomentumBuffer = 0;  // the index of "momentum_buffer" in state_kinds()

  bool with_momentum() const { return o_.momentum != 0; }

  void fused_bucket(GroupStep& s, const std::vector<std::size_t>& idx, bool is_first,
                    const std::optional<at::Tensor>& found) const {
    const auto params = pick(s.group().params, idx);
    const auto grads = pick(s.grads(), idx);
    if (with_momentum() && is_first) {
      // Zero, not empty: when found_inf skips this update the buffer stays zero, and with dampening 0 the next
      // update (is_first_step false) makes it the gradient, as a first update would (step() reads found_inf
      // on the host when dampening is not 0).
      for (std::size_t i : idx)
        s.state(kMomentumBuffer)[i] = at::zeros_like(s.group().params[i], at::MemoryFormat::Preserve);
    }
    const auto bufs = with_momentum() ? pick(s.state(kMomentumBuffer), idx) : std::vector<at::Tensor>{};
    const double wd = s.group().weight_decay;
    s.call_with_lr([&](const auto& lr) {  // the double, or the tensor overload (use_lr_tensor)
      at::_fused_sgd_(params, grads, bufs, wd, o_.momentum, lr, o_.dampening, o_.nesterov, /*maximize=*/false,
                      /*is_first_step=*/with_momentum() && is_first, /*grad_scale=*/std::nullopt, found);
    });
  }

  void foreach_bucket(GroupStep& s, const std::vector<std::size_t>& idx, bool is_first) const {
    const auto params = pick(s.group().params, idx);
    auto grads = pick(s.grads(), idx);
    const double wd = s.group().weight_decay;
    if (wd != 0) grads = at::_foreach_add(grads, params, wd);
    if (with_momentum()) {
      if (is_first) {
        for (std::size_t k = 0; k < idx.size(); ++k) {
          s.state(kMomentumBuffer)[idx[k]] = grads[k].clone(at::MemoryFormat::Preserve);
        }
      }
      auto bufs = pick(s.state(kMomentumBuffer), idx);
      if (!is_first) {
        at::_foreach_mul_(bufs, o_.momentum);
        at::_foreach_add_(bufs, grads, 1 - o_.dampening);
      }
      grads = o_.nesterov ? at::_foreach_add(grads, bufs, o_.momentum) : bufs;
    }
    at::_foreach_add_(params, grads, -s.lr());
  }

  OptimizerOptions o_;
};

void validate_sgd(const OptimizerOptions& o) {
  BELLOWS_CHECK_CONFIG(std::isfinite(o.momentum) && o.momentum >= 0,
                       fmt::format("optim.momentum is {}, expected >= 0", o.momentum), kOptimizerOptionsHint);
  BELLOWS_CHECK_CONFIG(o.dampening >= 0 && o.dampening <= 1,
                       fmt::format("optim.dampening is {}, expected in [0, 1]", o.dampening), kOptimizerOptionsHint);
  BELLOWS_CHECK_CONFIG(
      !o.nesterov || (o.momentum > 0 && o.dampening == 0),
      fmt::format("optim.nesterov is true with optim.momentum {} and optim.dampening {}", o.momentum, o.dampening),
      "Nesterov momentum needs optim.momentum > 0 and optim.dampening = 0");
}

OptimizerEntry sgd_entry() {
  OptimizerEntry e;
  e.name = "sgd";
  e.help = "SGD with optional momentum (dampening, Nesterov) and L2 weight decay";
  e.order = 2;
  e.state_kinds = {"momentum_buffer"};
  e.validate = validate_sgd;
  e.make = [](const OptimizerOptions& o) { return std::make_shared<const SgdRule>(o); };
  return e;
}

const OptimizerRegistrar kSgdOptimizerRegistered(sgd_entry());

}  // namespace
}  // namespace bellows::train
