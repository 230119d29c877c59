// The four precision policies as one class driven by a small table: which autocast dtype (if any), which TF32
// setting (if any), and whether the loss is scaled. All of them skip the optimizer step on non-finite gradients:
// fp16 through an enabled GradScaler, the others through a disabled one, whose check is the caller's flag
// (step_on_device: the trainer's gradient norm) or, in step(), the ATen unscale kernel with inv_scale = 1.
#include "bellows/precision/precision.h"

#include <ATen/Context.h>
#include <ATen/autocast_mode.h>
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <optional>

#include "bellows/util/check.h"
#include "bellows/util/suggest.h"

namespace bellows::precision {
namespace {

struct PolicySpec {
  const char* name;
  std::optional<c10::ScalarType> autocast;  // none: fp32 compute
  std::optional<bool> tf32;                 // none: configure_backends() leaves TF32 as it is
  bool loss_scaling;
};

// fp32 turns TF32 off explicitly: cuDNN convolutions default to TF32 on in PyTorch.
// The mixed policies leave TF32 alone: their matmuls run in bf16/fp16 and the rest is the user's choice.
constexpr PolicySpec kPolicies[] = {
    {"fp32", std::nullopt, false, false},
    {"tf32", std::nullopt, true, false},
    {"bf16-mixed", at::kBFloat16, std::nullopt, false},
    {"fp16-mixed", at::kHalf, std::nullopt, true},
};

GradScalerOptions scaler_options_for(const PolicySpec& spec, GradScalerOptions options) {
  if (!spec.loss_scaling) options.enabled = false;  // inf/NaN check only
  return options;
}

class Policy final : public Precision {
 public:
  Policy(const PolicySpec& spec, c10::Device device, const GradScalerOptions& scaler_options)
      : spec_(spec), device_(device), scaler_(scaler_options_for(spec, scaler_options)) {}

  std::string name() const override { return spec_.name; }
  c10::ScalarType autocast_dtype() const override { return spec_.autocast.value_or(at::kFloat); }

  void configure_backends() const override {
    if (!spec_.tf32) return;
    // These flags only steer CUDA (cuBLAS matmul, cuDNN convolution); on a CPU-only run they change nothing,
    // and CPU matmuls stay IEEE fp32 under "tf32". The legacy setters, not setFloat32Precision: 2.13 still
    // supports them (they are not deprecated in ATen/Context.h), and mixing the legacy and the new API makes
    // the legacy getters throw, which other code (hw/peaks.cpp, user code) still calls.
    at::globalContext().setAllowTF32CuBLAS(*spec_.tf32);
    at::globalContext().setAllowTF32CuDNN(*spec_.tf32);
  }

  std::unique_ptr<AutocastGuard> autocast() const override {
    if (spec_.autocast) return std::make_unique<AutocastGuard>(device_.type(), *spec_.autocast, true);
    // fp32/tf32: an fp32 region, even inside an outer autocast; nothing to switch where autocast does not exist.
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
  PolicySpec spec_;
  c10::Device device_;
  GradScaler scaler_;
};

}  // namespace

const std::vector<std::string>& precision_names() {
  static const std::vector<std::string> names = [] {
    std::vector<std::string> v;
    for (const PolicySpec& spec : kPolicies) v.emplace_back(spec.name);
    return v;
  }();
  return names;
}

std::unique_ptr<Precision> make_precision(const std::string& name, c10::Device device,
                                          const GradScalerOptions& scaler_options) {
  for (const PolicySpec& spec : kPolicies) {
    if (name == spec.name) return std::make_unique<Policy>(spec, device, scaler_options);
  }
  const std::string valid = fmt::format("{}", fmt::join(precision_names(), ", "));
  BELLOWS_CHECK_CONFIG(name != "auto", "precision 'auto' reached make_precision unresolved",
                       "resolve the plan first (plan::resolve turns auto into one of: " + valid + ")");
  const auto close = closest_match(name, precision_names());
  BELLOWS_FAIL(ErrorKind::kConfig, fmt::format("unknown precision '{}' (valid: {})", name, valid),
               close ? fmt::format("did you mean '{}'?", *close) : "set precision to one of: " + valid);
}

}  // namespace bellows::precision
