// Model tensors and RNG states for checkpoints; see checkpointing.h.
#include "bellows/train/checkpointing.h"

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <ATen/Context.h>
#include <ATen/detail/CUDAHooksInterface.h>
#include <fmt/format.h>
#include <fmt/ranges.h>

#include "bellows/util/check.h"
#include "bellows/util/format.h"
#include "bellows/util/module_tensors.h"  // defines: named_state

namespace bellows::train {

std::map<std::string, at::Tensor> model_tensors(const torch::nn::Module& model) {
  std::map<std::string, at::Tensor> out;
  for (const auto& [name, t] : named_state(model)) out.emplace(name, t.detach());
  return out;
}

std::vector<std::string> load_model_tensors(torch::nn::Module& model, const std::map<std::string, at::Tensor>& tensors, bool strict) {
  TensorLoadOptions options;
  options.strict = strict;
  return load_model_tensors(model, tensors, options);
}

std::vector<std::string> load_model_tensors(torch::nn::Module& model, const std::map<std::string, at::Tensor>& tensors,
                                            const TensorLoadOptions& o) {
  std::map<std::string, at::Tensor> targets;  // relative to the prefix
  for (auto& [name, t] : model_tensors(model)) {
    if (name.starts_with(o.prefix)) targets.emplace(name.substr(o.prefix.size()), t);
  }
  std::vector<std::string> differences;
  for (const auto& [name, target] : targets) {
    auto it = tensors.find(name);
    if (it == tensors.end()) {
      differences.push_back(fmt::format("{}: missing from {}", name, o.source));
    } else if (it->second.sizes() != target.sizes()) {
      differences.push_back(fmt::format("{}: shape {} in {}, {} in {}", name, shape_of(it->second), o.source, shape_of(target), o.target));
    }
  }
  for (const auto& [name, t] : tensors) {
    if (!targets.count(name)) differences.push_back(fmt::format("{}: in {}, not in {}", name, o.source, o.target));
  }
  BELLOWS_CHECK_DATA(!o.strict || differences.empty(),
                     fmt::format("{} does not fit {} ({} differences): {}", o.subject.empty() ? o.source : o.subject, o.target, differences.size(), fmt::join(differences, "; ")),
                     o.hint);
  c10::NoGradGuard no_grad;
  for (auto& [name, target] : targets) {
    auto it = tensors.find(name);
    if (it != tensors.end() && it->second.sizes() == target.sizes()) target.copy_(it->second);
  }
  return differences;
}

StateDict rng_state() {
  StateDict s;
  s["cpu"] = at::detail::getDefaultCPUGenerator().get_state();
  if (at::hasCUDA()) {
    const auto n = at::detail::getCUDAHooks().deviceCount();
    for (c10::DeviceIndex i = 0; i < n; ++i) s[fmt::format("cuda.{}", i)] = at::globalContext().defaultGenerator(c10::Device(c10::kCUDA, i)).get_state();
  }
  return s;
}

void load_rng_state(const StateDict& state) {
  for (const auto& [name, t] : state) {
    if (name == "cpu") {
      at::Generator g = at::detail::getDefaultCPUGenerator();  // a handle sharing the default generator
      std::lock_guard<std::mutex> lock(g.mutex());
      g.set_state(t);
    } else if (name.rfind("cuda.", 0) == 0 && at::hasCUDA()) {
      const auto i = static_cast<c10::DeviceIndex>(std::stoi(name.substr(5)));
      if (i < at::detail::getCUDAHooks().deviceCount()) {
        at::Generator g = at::globalContext().defaultGenerator(c10::Device(c10::kCUDA, i));
        std::lock_guard<std::mutex> lock(g.mutex());
        g.set_state(t);
      }
    }
  }
}

}  // namespace bellows::train
