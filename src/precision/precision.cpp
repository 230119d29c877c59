// The precision-policy registry (registry.h) and the standard policy: one class driven by an entry's fields (which
// autocast dtype, if any; which TF32 setting, if any; whether the loss is scaled). Every policy skips the optimizer
// step on non-finite gradients: fp16 through an enabled GradScaler, the others through a disabled one, whose check is
// the caller's flag (step_on_device: the trainer's gradient norm) or, in step(), the ATen unscale kernel with
// inv_scale = 1. The policies themselves register from src/precision/policies/.
#include "bellows/precision/precision.h"

#include <ATen/Context.h>
#include <ATen/autocast_mode.h>
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>

#include "bellows/util/check.h"
#include "bellows/util/registry.h"

namespace bellows::precision {
namespace {

Registry<PrecisionEntry>& policies() { return registry_of<PrecisionEntry>("precision policy"); }

GradScalerOptions scaler_options_for(const PrecisionEntry& entry, GradScalerOptions options) {
  if (!entry.scales_loss) options.enabled = false;  // inf/NaN check only
  return options;
}

class StandardPolicy final : public Precision {
 public:
  StandardPolicy(const PrecisionEntry& entry, c10::Device device, const GradScalerOptions& scaler_options)
      : entry_(entry), device_(device), scaler_(scaler_options_for(entry, scaler_options)) {}

  const PrecisionEntry& entry() const override { return entry_; }

  void configure_backends() const override {
    if (!entry_.tf32) return;
    // These flags only steer CUDA (cuBLAS matmul, cuDNN convolution); on a CPU-only run they change nothing,
    // and CPU matmuls stay IEEE fp32 under "tf32". The legacy setters, not setFloat32Precision: 2.13 still
    // supports them (they are not deprecated in ATen/Context.h), and mixing the legacy and the new API makes
    // the legacy getters throw, which other code (hw/peaks.cpp, user code) still calls.
    at::globalContext().setAllowTF32CuBLAS(*entry_.tf32);
    at::globalContext().setAllowTF32CuDNN(*entry_.tf32);
  }

  std::unique_ptr<AutocastGuard> autocast() const override {
    if (entry_.autocast) return std::make_unique<AutocastGuard>(device_.type(), *entry_.autocast, true);
    // Full precision: an fp32 region, even inside an outer autocast; nothing to switch where autocast does not exist.
    if (!at::autocast::is_autocast_available(device_.type())) return nullptr;
    return std::make_unique<AutocastGuard>(device_.type(), at::kFloat, false);
  }

  at::Tensor scale_loss(const at::Tensor& loss) override { return scaler_.scale(loss); }

  void unscale(const std::vector<at::Tensor>& params) override {
    if (scaler_.is_enabled()) scaler_.unscale_(params);  // the others have nothing to unscale
  }

  at::Tensor step_on_device(const std::vector<at::Tensor>& params, const at::Tensor& nonfinite,
                            const std::function<void(const at::Tensor&)>& optimizer_step) override {
    at::Tensor found = scaler_.step_on_device(params, nonfinite, optimizer_step);
    scaler_.update();
    return found;
  }

  void abandon_step() override { scaler_.abandon_step(); }

  std::int64_t skipped_steps() const override { return scaler_.skipped_steps(); }

  StepOutcome step(const std::vector<at::Tensor>& params, const std::function<void()>& optimizer_step) override {
    StepOutcome outcome;
    outcome.stepped = scaler_.step(params, optimizer_step);
    scaler_.update();
    return outcome;
  }

  std::vector<std::pair<std::string, double>> metrics() const override {
    std::vector<std::pair<std::string, double>> out;
    out.emplace_back("skipped_steps", static_cast<double>(scaler_.skipped_steps()));
    if (scaler_.is_enabled()) out.emplace_back("loss_scale", scaler_.get_scale());
    return out;
  }

  StateDict state_dict() const override { return scaler_.state_dict(); }
  void load_state_dict(const StateDict& state) override { scaler_.load_state_dict(state); }

 private:
  const PrecisionEntry& entry_;  // the registry's: its entries live as long as the process
  c10::Device device_;
  GradScaler scaler_;
};

}  // namespace

void register_precision(PrecisionEntry entry) { policies().add(std::move(entry)); }

std::vector<PrecisionEntry> precision_entries() { return in_order(policies().all()); }

std::vector<std::string> precision_names() { return names_of(precision_entries()); }

const PrecisionEntry& find_precision(const std::string& name) {
  const std::vector<std::string> names = precision_names();
  const std::string valid = fmt::format("{}", fmt::join(names, ", "));
  BELLOWS_CHECK_CONFIG(name != "auto", "precision 'auto' reached the precision policies unresolved",
                       "resolve the plan first (plan::resolve turns auto into one of: " + valid + ")");
  BELLOWS_CHECK_CONFIG(std::find(names.begin(), names.end(), name) != names.end(), fmt::format("unknown precision '{}'", name),
                       suggestion_hint(name, names));
  return policies().find(name);
}

AutoPrecision auto_precision(const DeviceFacts& device) {
  AutoPrecision best;
  int preference = 0;
  for (const PrecisionEntry& e : precision_entries()) {
    if (e.auto_preference <= preference || !e.auto_reason) continue;
    if (std::optional<std::string> reason = e.auto_reason(device)) {
      best = {&find_precision(e.name), std::move(*reason)};
      preference = e.auto_preference;
    }
  }
  BELLOWS_CHECK(best.entry != nullptr, fmt::format("no precision policy is chosen by auto on {}", device.who),
                "register a policy whose auto_reason always gives a reason (fp32's does)");
  return best;
}

std::string Precision::name() const { return entry().name; }
c10::ScalarType Precision::autocast_dtype() const { return entry().autocast.value_or(at::kFloat); }
bool Precision::scales_loss() const { return entry().scales_loss; }

std::unique_ptr<Precision> make_precision(const std::string& name, c10::Device device, const GradScalerOptions& scaler_options) {
  const PrecisionEntry& entry = find_precision(name);
  if (entry.make) return entry.make(entry, device, scaler_options);
  return std::make_unique<StandardPolicy>(entry, device, scaler_options);
}

}  // namespace bellows::precision
