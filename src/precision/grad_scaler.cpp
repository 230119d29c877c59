// GradScaler: PyTorch's torch.amp.GradScaler for one optimizer, on the same ATen kernels. The per-step state
// (found_inf per device, unscaled/stepped) lives between unscale_() and update(); the scale and growth tracker
// live on the gradients' device once the scaler has seen them, so nothing syncs except step()'s found_inf read;
// step_on_device() leaves that read to whoever asks for the skip count.
#include "bellows/precision/grad_scaler.h"

#include <ATen/ATen.h>
#include <ATen/core/grad_mode.h>
#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "bellows/util/check.h"

namespace bellows::precision {
namespace {

void check_options(const GradScalerOptions& o, ErrorKind kind) {
  const char* hint = "use GradScaler's defaults (init_scale 65536, growth 2, backoff 0.5, interval 2000)";
  BELLOWS_CHECK_KIND(kind, std::isfinite(o.init_scale) && o.init_scale > 0,
                     fmt::format("loss scale {} is not a positive finite number", o.init_scale), hint);
  BELLOWS_CHECK_KIND(kind, std::isfinite(o.growth_factor) && o.growth_factor >= 1,
                     fmt::format("scale growth_factor {} is below 1", o.growth_factor), hint);
  BELLOWS_CHECK_KIND(kind, o.backoff_factor > 0 && o.backoff_factor <= 1,
                     fmt::format("scale backoff_factor {} is not in (0, 1]", o.backoff_factor), hint);
  BELLOWS_CHECK_KIND(kind, o.growth_interval >= 1,
                     fmt::format("scale growth_interval {} is below 1", o.growth_interval), hint);
}

// The kernel takes one device and dtype per call, so gradients are grouped like torch.amp.GradScaler does.
struct GradGroup {
  c10::Device device;
  c10::ScalarType dtype;
  std::vector<at::Tensor> grads;
};

std::vector<GradGroup> group_grads(const std::vector<at::Tensor>& params, bool refuse_fp16) {
  std::vector<GradGroup> groups;
  for (const at::Tensor& p : params) {
    if (!p.defined() || !p.grad().defined()) continue;  // frozen or unused this step
    // A sparse gradient's non-zeros are its values; unscaling those in place unscales the gradient.
    at::Tensor g = p.grad().is_sparse() ? p.grad()._values() : p.grad();
    BELLOWS_CHECK_CONFIG(!(refuse_fp16 && g.scalar_type() == at::kHalf),
                         "fp16 gradients cannot be unscaled (the parameters are fp16)",
                         "keep the parameters in fp32 with precision fp16-mixed (autocast casts for compute), "
                         "or use bf16-mixed");
    auto it = std::find_if(groups.begin(), groups.end(), [&](const GradGroup& grp) {
      return grp.device == g.device() && grp.dtype == g.scalar_type();
    });
    if (it == groups.end()) it = groups.insert(groups.end(), GradGroup{g.device(), g.scalar_type(), {}});
    it->grads.push_back(std::move(g));
  }
  return groups;
}

// Copies to a device are queued on its stream; copies to the CPU must wait, or the CPU could read them early.
at::Tensor on_device(const at::Tensor& t, c10::Device device) {
  return t.to(device, /*non_blocking=*/!device.is_cpu());
}

}  // namespace

GradScaler::GradScaler(GradScalerOptions options) : options_(options) {
  check_options(options_, ErrorKind::kConfig);
  scale_ = at::full({}, options_.init_scale, at::TensorOptions().dtype(at::kFloat));
  growth_tracker_ = at::zeros({}, at::TensorOptions().dtype(at::kInt));
}

void GradScaler::place(c10::Device device) {
  if (placed_) return;
  scale_ = scale_.to(device);
  growth_tracker_ = growth_tracker_.to(device);
  placed_ = true;
}

const at::Tensor& GradScaler::found_inf_on(c10::Device device) {
  for (const auto& [d, t] : found_inf_) {
    if (d == device) return t;
  }
  found_inf_.emplace_back(device, at::zeros({}, at::TensorOptions().dtype(at::kFloat).device(device)));
  return found_inf_.back().second;
}

at::Tensor GradScaler::inv_scale_on(c10::Device device) const {
  if (!options_.enabled) return at::ones({}, at::TensorOptions().dtype(at::kFloat).device(device));
  // The reciprocal in fp64, as PyTorch does: fp32 division is not exact under every compile option.
  return on_device(scale_.to(at::kDouble).reciprocal().to(at::kFloat), device);
}

at::Tensor GradScaler::scale(const at::Tensor& loss) {
  if (!options_.enabled) return loss;
  place(loss.device());
  return loss * on_device(scale_, loss.device());
}

void GradScaler::unscale_(const std::vector<at::Tensor>& params) {
  if (unscaled_) return;  // once per step: gradients are already true values
  at::NoGradGuard no_grad;
  std::vector<GradGroup> groups = group_grads(params, options_.enabled);
  if (options_.enabled && !groups.empty()) place(groups.front().device);
  for (GradGroup& grp : groups) {
    at::Tensor found_inf = found_inf_on(grp.device);  // shares storage with the recorded one
    at::_amp_foreach_non_finite_check_and_unscale_(grp.grads, found_inf, inv_scale_on(grp.device));
  }
  unscaled_ = true;
}

bool GradScaler::step(const std::vector<at::Tensor>& params, const std::function<void()>& optimizer_step) {
  BELLOWS_CHECK(!stepped_, "GradScaler::step() called twice without update() in between",
                "call update() after each step()");
  unscale_(params);
  double found = 0;
  for (const auto& [device, t] : found_inf_) found += t.item<double>();  // the one sync of the step
  stepped_ = true;
  last_skipped_ = found != 0;
  last_found_ = at::Tensor();
  if (last_skipped_) {
    ++skipped_steps_;
  } else {
    optimizer_step();
  }
  return !last_skipped_;
}

at::Tensor GradScaler::step_on_device(const std::vector<at::Tensor>& params, const at::Tensor& nonfinite,
                                      const std::function<void(const at::Tensor&)>& optimizer_step) {
  BELLOWS_CHECK(!stepped_, "GradScaler::step_on_device() called twice without update() in between",
                "call update() after each step");
  if (options_.enabled || !nonfinite.defined()) unscale_(params);
  at::NoGradGuard no_grad;
  at::Tensor found;
  if (found_inf_.empty() && nonfinite.defined()) {
    found = nonfinite;  // already 0 or 1: no op needed (the disabled scaler's every step)
  } else {
    found = nonfinite.defined() ? nonfinite.to(at::kFloat).reshape({}) : at::Tensor();
    for (const auto& [device, t] : found_inf_) found = found.defined() ? found + on_device(t, found.device()) : t.clone();
    if (!found.defined()) found = at::zeros({}, at::TensorOptions().dtype(at::kFloat).device(scale_.device()));  // nothing seen
    found = found.clamp_max(1.0);  // the fused kernels skip on exactly 1
  }
  stepped_ = true;
  optimizer_step(found);
  // A double count: exact far beyond any run's step count, and one op (no cast) per step.
  if (!skipped_on_device_.defined()) skipped_on_device_ = at::zeros({}, at::TensorOptions().dtype(at::kDouble).device(found.device()));
  skipped_on_device_.add_(on_device(found, skipped_on_device_.device()));
  step_found_ = found;
  last_found_ = found;
  return found;
}

std::int64_t GradScaler::skipped_steps() const {
  return skipped_steps_ + (skipped_on_device_.defined() ? static_cast<std::int64_t>(skipped_on_device_.item<double>()) : 0);
}

bool GradScaler::last_step_skipped() const {
  return last_found_.defined() ? last_found_.item<float>() != 0 : last_skipped_;
}

void GradScaler::update() {
  if (options_.enabled) {
    at::Tensor found = at::zeros({}, scale_.options());
    if (step_found_.defined()) found = on_device(step_found_, scale_.device());
    else for (const auto& [device, t] : found_inf_) found = found + on_device(t, scale_.device());
    at::_amp_update_scale_(scale_, growth_tracker_, found, options_.growth_factor, options_.backoff_factor,
                           options_.growth_interval);
  }
  reset_step();
}

void GradScaler::abandon_step() {
  reset_step();
  last_found_ = at::Tensor();
}

void GradScaler::reset_step() {
  found_inf_.clear();
  step_found_ = at::Tensor();
  unscaled_ = false;
  stepped_ = false;
}

double GradScaler::get_scale() const {
  return options_.enabled ? scale_.item<double>() : 1.0;
}

std::int64_t GradScaler::growth_tracker() const {
  return options_.enabled ? growth_tracker_.item<std::int64_t>() : 0;
}

StateDict GradScaler::state_dict() const {
  StateDict dict;
  put_int(dict, "skipped_steps", skipped_steps());
  if (options_.enabled) {
    put_double(dict, "scale", get_scale());
    put_int(dict, "growth_tracker", growth_tracker());
    put_double(dict, "growth_factor", options_.growth_factor);
    put_double(dict, "backoff_factor", options_.backoff_factor);
    put_int(dict, "growth_interval", options_.growth_interval);
  }
  return dict;
}

void GradScaler::load_state_dict(const StateDict& state) {
  const std::int64_t skipped = get_int(state, "skipped_steps");
  BELLOWS_CHECK_DATA(skipped >= 0, fmt::format("saved skipped_steps {} is negative", skipped),
                     "the state is corrupt or was written for a different object");
  if (options_.enabled) {
    // Read everything before changing anything, so that a bad dict leaves the scaler as it was.
    GradScalerOptions loaded = options_;
    loaded.init_scale = get_double(state, "scale");
    loaded.growth_factor = get_double(state, "growth_factor");
    loaded.backoff_factor = get_double(state, "backoff_factor");
    loaded.growth_interval = get_int(state, "growth_interval");
    const std::int64_t tracker = get_int(state, "growth_tracker");
    check_options(loaded, ErrorKind::kData);
    BELLOWS_CHECK_DATA(
        tracker >= 0 && tracker < loaded.growth_interval,
        fmt::format("saved growth_tracker {} is outside [0, growth_interval {})", tracker, loaded.growth_interval),
        "the state is corrupt or was written for a different object");
    options_.growth_factor = loaded.growth_factor;
    options_.backoff_factor = loaded.backoff_factor;
    options_.growth_interval = loaded.growth_interval;
    // fill_ keeps the tensors where they are: on the CPU before first use (then moved to the gradients' device
    // by place()), or already on the gradients' device.
    scale_.fill_(loaded.init_scale);
    growth_tracker_.fill_(tracker);
  }
  skipped_steps_ = skipped;
  skipped_on_device_ = at::Tensor();
  last_skipped_ = false;
  last_found_ = at::Tensor();
  reset_step();
}

}  // namespace bellows::precision
