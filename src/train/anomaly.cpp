// detect_anomaly's checks; see anomaly.h.
#include "bellows/train/anomaly.h"

#include <ATen/ATen.h>
#include <fmt/format.h>

#include <cmath>
#include <string>
#include <utility>
#include <vector>

#include "bellows/precision/precision.h"
#include "bellows/util/check.h"
#include "bellows/util/module_tensors.h"  // defines: named_parameters

namespace bellows::train {
namespace {

// The name of the first tensor with a NaN or an infinity ("" when all are finite), and what it holds.
std::string first_nonfinite(const std::vector<std::pair<std::string, at::Tensor>>& named) {
  for (const auto& [name, t] : named) {
    if (!t.defined() || !at::isFloatingType(t.scalar_type())) continue;
    const at::Tensor bad = t.detach().isfinite().logical_not();
    if (const std::int64_t n = bad.sum().item<std::int64_t>(); n > 0) {
      return fmt::format("{} ({} of {} values: {} NaN, {} infinite)", name, n, t.numel(), t.detach().isnan().sum().item<std::int64_t>(),
                         t.detach().isinf().sum().item<std::int64_t>());
    }
  }
  return "";
}

}  // namespace

void check_forward(const torch::nn::Module& model, const data::Batch& batch, const at::Tensor& loss, std::int64_t number) {
  std::vector<std::pair<std::string, at::Tensor>> inputs(batch.tensors.begin(), batch.tensors.end());
  const std::string bad_input = first_nonfinite(inputs);
  BELLOWS_CHECK_DATA(bad_input.empty(), fmt::format("non-finite values in the batch of optimizer step {}: {}", number, bad_input),
                     "the data has NaN or infinite values: clean them at the source (data.csv.missing for CSV files)");
  if (first_nonfinite({{"loss", loss}}).empty()) return;
  const NamedTensors params = bellows::named_parameters(model);
  const std::string bad_param = first_nonfinite(params);
  std::string largest;  // finite parameters that grew large overflow a forward
  double largest_abs = -1;
  for (const auto& [name, p] : params) {
    if (!at::isFloatingType(p.scalar_type()) || p.numel() == 0) continue;
    if (const double m = p.detach().abs().max().item<double>(); m > largest_abs) largest_abs = m, largest = name;
  }
  BELLOWS_FAIL(ErrorKind::kData,
               fmt::format("non-finite loss ({}) in the forward pass of optimizer step {}: the inputs are finite, {}", loss.item<double>(), number,
                           bad_param.empty() ? fmt::format("and so are the parameters (largest magnitude {:.3g}, in {}): the forward overflowed",
                                                           largest_abs, largest)
                                             : "the parameters are not: " + bad_param),
               "lower the learning rate, clip gradients (train.clip_max_norm), or use fp32 if a reduced precision overflows");
}

void fail_backward(const c10::Error& error, std::int64_t number) {
  BELLOWS_FAIL(ErrorKind::kData, fmt::format("non-finite values in the backward pass of optimizer step {}: {}", number, error.what_without_backtrace()),
               "the loss was finite: an op's gradient overflowed (lower the learning rate, clip gradients, or check the "
               "function autograd named)");
}

void check_gradient_norms(const torch::nn::Module& model, const std::vector<at::Tensor>& params, const at::Tensor& norms,
                          const std::vector<std::int32_t>& indices, const precision::Precision& precision, std::int64_t number) {
  if (precision.scales_loss() || !norms.defined()) return;  // the loss scaler skips these steps by design
  const at::Tensor host = norms.detach().to(at::kCPU, at::kDouble).contiguous();
  const double* v = host.data_ptr<double>();
  for (std::int64_t k = 0; k < host.numel() && static_cast<std::size_t>(k) < indices.size(); ++k) {
    if (std::isfinite(v[k])) continue;
    const at::Tensor& p = params[static_cast<std::size_t>(indices[static_cast<std::size_t>(k)])];
    std::string name = fmt::format("trainable parameter {}", indices[static_cast<std::size_t>(k)]);
    for (const auto& [n, q] : bellows::named_parameters(model)) {
      if (q.unsafeGetTensorImpl() == p.unsafeGetTensorImpl()) name = n;
    }
    // Where this rank holds the gradient, how many of its values are not finite.
    const std::string values = first_nonfinite({{name, p.grad()}});
    BELLOWS_FAIL(ErrorKind::kData,
                 fmt::format("non-finite gradient after the backward pass of optimizer step {}: {} (gradient norm {}{})", number,
                             values.empty() ? name : values, v[k], values.empty() ? ", combined over the ranks that hold the gradients" : ""),
                 "the loss was finite: lower the learning rate or clip gradients (train.clip_max_norm)");
  }
}

void check_parameters(const torch::nn::Module& model, std::int64_t step, double lr) {
  const std::string bad = first_nonfinite(bellows::named_parameters(model));
  BELLOWS_CHECK_DATA(bad.empty(), fmt::format("non-finite parameter after the optimizer of step {} (lr {:.4g}): {}", step, lr, bad),
                     "the gradients were finite: the update overflowed; lower the learning rate or check optim.eps");
}

}  // namespace bellows::train
