// Post hooks on parameters' gradient accumulators (private to dist/): Ddp marks a bucket's gradient ready with them,
// Fsdp releases a unit's weights once all its gradients are in. The hooks go when clear() is called or the object
// does; it holds the accumulators, whose nodes autograd otherwise keeps only while a graph refers to them.
#pragma once

#include <ATen/core/Tensor.h>
#include <torch/csrc/autograd/function.h>
#include <torch/csrc/autograd/utils/lambda_post_hook.h>
#include <torch/csrc/autograd/variable.h>
#include <torch/headeronly/version.h>  // TORCH_VERSION_MINOR

#include <cstdint>
#include <functional>
#include <utility>
#include <vector>

#include "bellows/util/check.h"

namespace bellows::dist {

class GradientHooks {
 public:
  GradientHooks() = default;
  GradientHooks(const GradientHooks&) = delete;
  GradientHooks& operator=(const GradientHooks&) = delete;
  ~GradientHooks() { clear(); }

  // `on_ready` runs each time autograd has accumulated `param`'s gradient.
  void add(const at::Tensor& param, std::function<void()> on_ready) {
    auto node = torch::autograd::impl::grad_accumulator(param);
    BELLOWS_CHECK(node, "a trainable parameter has no gradient accumulator", "report this bug");
    const std::uintptr_t key = node->add_post_hook(std::make_unique<torch::autograd::utils::LambdaPostHook>(
        [on_ready = std::move(on_ready)](const torch::autograd::variable_list& outputs, const torch::autograd::variable_list&) {
          on_ready();
          return outputs;
        }));
    hooks_.emplace_back(std::move(node), key);
  }

  void clear() {
    for (auto& [node, key] : hooks_) node->del_post_hook(key);
    hooks_.clear();
  }

 private:
  // What grad_accumulator returns: torch 2.13 made autograd's Node pointers intrusive; 2.11 and 2.12 hand out
  // std::shared_ptr<Node>.
#if TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR < 13
  using NodePtr = std::shared_ptr<torch::autograd::Node>;
#else
  using NodePtr = c10::intrusive_ptr<torch::autograd::Node>;
#endif
  std::vector<std::pair<NodePtr, std::uintptr_t>> hooks_;
};

}  // namespace bellows::dist
