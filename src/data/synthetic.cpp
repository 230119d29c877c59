// Synthetic datasets; see synthetic.h.
#include "bellows/data/synthetic.h"

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <fmt/format.h>

#include <cmath>

#include "bellows/util/check.h"

namespace bellows::data {

std::map<std::string, at::Tensor> make_synthetic(const SyntheticOptions& o) {
  BELLOWS_CHECK_CONFIG(o.samples > 0 && o.features > 0,
                       fmt::format("synthetic data needs samples > 0 and features > 0 (got {} and {})", o.samples, o.features),
                       "set data.samples and data.features");
  BELLOWS_CHECK_CONFIG(o.kind == "regression" || (o.kind == "classification" && o.classes >= 2),
                       fmt::format("synthetic kind '{}' with {} classes", o.kind, o.classes),
                       "use kind regression, or classification with classes >= 2");
  auto gen = at::make_generator<at::CPUGeneratorImpl>(o.seed);
  const auto f32 = at::TensorOptions().dtype(at::kFloat);
  const std::int64_t hidden = 32;
  const at::Tensor w1 = at::randn({o.features, hidden}, gen, f32) / std::sqrt(static_cast<double>(o.features));
  const at::Tensor x = at::randn({o.samples, o.features}, gen, f32);
  const at::Tensor h = at::tanh(at::matmul(x, w1) * 2.0);
  if (o.kind == "regression") {
    const at::Tensor w2 = at::randn({hidden, 1}, gen, f32) / std::sqrt(static_cast<double>(hidden));
    const at::Tensor y = at::matmul(h, w2) + o.noise * at::randn({o.samples, 1}, gen, f32);
    return {{"x", x}, {"y", y}};
  }
  const at::Tensor w2 = at::randn({hidden, o.classes}, gen, f32);
  return {{"x", x}, {"y", at::matmul(h, w2).argmax(1)}};
}

std::pair<std::map<std::string, at::Tensor>, std::map<std::string, at::Tensor>> split_tail(
    const std::map<std::string, at::Tensor>& tensors, double fraction) {
  BELLOWS_CHECK_CONFIG(fraction >= 0 && fraction < 1, fmt::format("validation fraction {} outside [0, 1)", fraction),
                       "set data.val_fraction between 0 and 1");
  std::map<std::string, at::Tensor> train, val;
  for (const auto& [name, t] : tensors) {
    const std::int64_t n = t.size(0);
    const std::int64_t n_val = static_cast<std::int64_t>(std::floor(n * fraction));
    train.emplace(name, t.slice(0, 0, n - n_val));
    if (n_val > 0) val.emplace(name, t.slice(0, n - n_val, n));
  }
  return {train, val};
}

}  // namespace bellows::data
