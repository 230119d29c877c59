// Activation checkpointing; see activation_checkpoint.h. Written here because LibTorch's C++ frontend has no
// checkpoint (PyTorch #52744); this is a torch::autograd::Function whose inputs are the block's inputs and
// parameters, so autograd accumulates the parameter gradients like any other node's.
#include "bellows/models/activation_checkpoint.h"

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <ATen/autocast_mode.h>
#include <ATen/core/ivalue.h>
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <torch/csrc/autograd/autograd.h>
#include <torch/csrc/autograd/custom_function.h>
#include <torch/custom_class.h>

#include <mutex>

#include "bellows/util/check.h"
#include "bellows/util/name_patterns.h"  // defines: select_names

namespace bellows::models {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// One generator's state, to restore for the recomputation.
struct RngState {
  at::Generator generator;
  at::Tensor state;
};

at::Tensor get_state(at::Generator& g) {
  std::lock_guard<std::mutex> lock(g.mutex());
  return g.get_state();
}
void set_state(at::Generator& g, const at::Tensor& state) {
  std::lock_guard<std::mutex> lock(g.mutex());
  g.set_state(state);
}

std::vector<RngState> capture_rng(const std::vector<at::Tensor>& tensors) {
  std::vector<RngState> states;
  at::Generator cpu = at::detail::getDefaultCPUGenerator();
  states.push_back({cpu, get_state(cpu)});
  std::set<c10::DeviceIndex> cuda_devices;
  for (const auto& t : tensors) {
    if (t.defined() && t.is_cuda()) cuda_devices.insert(t.device().index());
  }
  for (const auto index : cuda_devices) {
    at::Generator g = at::globalContext().defaultGenerator(c10::Device(c10::kCUDA, index));
    states.push_back({g, get_state(g)});
  }
  return states;
}

// The autocast switches for the device types bellows trains on.
struct AutocastState {
  struct One {
    c10::DeviceType type;
    bool enabled;
    c10::ScalarType dtype;
  };
  std::vector<One> devices;
  static AutocastState capture() {
    AutocastState s;
    for (const auto type : {c10::DeviceType::CPU, c10::DeviceType::CUDA}) {
      s.devices.push_back({type, at::autocast::is_autocast_enabled(type), at::autocast::get_autocast_dtype(type)});
    }
    return s;
  }
  void apply() const {
    for (const auto& d : devices) {
      at::autocast::set_autocast_enabled(d.type, d.enabled);
      at::autocast::set_autocast_dtype(d.type, d.dtype);
    }
  }
  bool any_enabled() const {
    for (const auto& d : devices) {
      if (d.enabled) return true;
    }
    return false;
  }
};

// Everything the backward needs besides the saved inputs; held by the autograd context as a capsule.
struct BlockState : torch::CustomClassHolder {
  BlockFunction fn;
  std::size_t n_inputs = 0;
  std::vector<RngState> rng;
  AutocastState autocast;
};

thread_local int recompute_depth = 0;

struct RecomputeScope {
  RecomputeScope() { ++recompute_depth; }
  ~RecomputeScope() { --recompute_depth; }
  RecomputeScope(const RecomputeScope&) = delete;
  RecomputeScope& operator=(const RecomputeScope&) = delete;
};

struct CheckpointFunction : torch::autograd::Function<CheckpointFunction> {
  static variable_list forward(AutogradContext* ctx, at::TensorList tensors, c10::intrusive_ptr<BlockState> state) {
    std::vector<at::Tensor> inputs(tensors.begin(), tensors.begin() + static_cast<std::ptrdiff_t>(state->n_inputs));
    state->rng = capture_rng(inputs);
    state->autocast = AutocastState::capture();
    // Autograd runs forward under no-grad: nothing inside the block is kept for backward.
    variable_list outputs = state->fn(inputs);
    ctx->save_for_backward(tensors.vec());
    ctx->saved_data["state"] = c10::IValue::make_capsule(state);
    return outputs;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grad_outputs) {
    const variable_list saved = ctx->get_saved_variables();
    auto state = c10::static_intrusive_pointer_cast<BlockState>(ctx->saved_data["state"].toCapsule());
    const std::size_t n = state->n_inputs;
    std::vector<at::Tensor> inputs;
    inputs.reserve(n);
    for (std::size_t i = 0; i < n; ++i) {
      const at::Tensor& x = saved[i];
      inputs.push_back(x.defined() ? x.detach().requires_grad_(x.requires_grad()) : x);
    }

    // Recompute with the forward's RNG and autocast state, then put back the current ones.
    variable_list outputs;
    {
      std::vector<RngState> now;
      for (auto& r : state->rng) now.push_back({r.generator, get_state(r.generator)});
      const AutocastState autocast_now = AutocastState::capture();
      for (auto& r : state->rng) set_state(r.generator, r.state);
      state->autocast.apply();
      const bool nest = state->autocast.any_enabled();
      if (nest) at::autocast::increment_nesting();
      try {
        at::AutoGradMode grad(true);
        RecomputeScope scope;
        outputs = state->fn(inputs);
      } catch (...) {
        if (nest && at::autocast::decrement_nesting() == 0) at::autocast::clear_cache();
        autocast_now.apply();
        for (auto& r : now) set_state(r.generator, r.state);
        throw;
      }
      if (nest && at::autocast::decrement_nesting() == 0) at::autocast::clear_cache();
      autocast_now.apply();
      for (auto& r : now) set_state(r.generator, r.state);
    }

    // Gradients of the outputs that carry one, with respect to the inputs and parameters that need one.
    variable_list outs, grads, targets;
    std::vector<std::size_t> target_index;
    for (std::size_t i = 0; i < outputs.size() && i < grad_outputs.size(); ++i) {
      if (outputs[i].defined() && outputs[i].requires_grad() && grad_outputs[i].defined()) {
        outs.push_back(outputs[i]);
        grads.push_back(grad_outputs[i]);
      }
    }
    for (std::size_t i = 0; i < saved.size(); ++i) {
      const at::Tensor& t = i < n ? inputs[i] : saved[i];
      if (t.defined() && t.requires_grad()) {
        targets.push_back(t);
        target_index.push_back(i);
      }
    }
    variable_list result(saved.size() + 1);  // + the state argument, which has no gradient
    if (outs.empty() || targets.empty()) return result;
    const variable_list g = torch::autograd::grad(outs, targets, grads, /*retain_graph=*/false,
                                                  /*create_graph=*/false, /*allow_unused=*/true);
    for (std::size_t k = 0; k < g.size(); ++k) result[target_index[k]] = g[k];
    return result;
  }
};

// The identity on a block's outputs whose backward calls BlockHooks::before_backward first: autograd reaches it before
// any node of the block, so the block's parameters are back before its backward (or recomputation) reads them.
struct BeforeBackwardState : torch::CustomClassHolder {
  std::shared_ptr<BlockHooks> hooks;
  std::string name;
};

struct BeforeBackwardFunction : torch::autograd::Function<BeforeBackwardFunction> {
  static variable_list forward(AutogradContext* ctx, at::TensorList tensors, c10::intrusive_ptr<BeforeBackwardState> state) {
    ctx->saved_data["state"] = c10::IValue::make_capsule(state);
    return tensors.vec();  // autograd returns views of inputs returned unchanged
  }
  static variable_list backward(AutogradContext* ctx, variable_list grad_outputs) {
    auto state = c10::static_intrusive_pointer_cast<BeforeBackwardState>(ctx->saved_data["state"].toCapsule());
    state->hooks->before_backward(state->name);
    grad_outputs.emplace_back();  // the state argument has no gradient
    return grad_outputs;
  }
};

}  // namespace

bool recomputing() { return recompute_depth > 0; }

std::vector<at::Tensor> checkpoint(const BlockFunction& fn, const std::vector<at::Tensor>& inputs,
                                   const std::vector<at::Tensor>& params) {
  bool needs_grad = false;
  for (const auto* list : {&inputs, &params}) {
    for (const auto& t : *list) needs_grad = needs_grad || (t.defined() && t.requires_grad());
  }
  if (!at::GradMode::is_enabled() || !needs_grad) return fn(inputs);
  for (const auto& t : inputs) {
    BELLOWS_CHECK(t.defined(), "activation checkpointing: a block input is an undefined tensor",
                  "pass only defined tensors to a checkpointed block");
  }
  auto state = c10::make_intrusive<BlockState>();
  state->fn = fn;
  state->n_inputs = inputs.size();
  std::vector<at::Tensor> all = inputs;
  all.insert(all.end(), params.begin(), params.end());
  return CheckpointFunction::apply(at::TensorList(all), state);
}

void Checkpointable::set_checkpointed(const std::vector<std::string>& names) {
  const auto blocks = checkpoint_blocks();
  for (const auto& name : names) {
    BELLOWS_CHECK_CONFIG(std::find(blocks.begin(), blocks.end(), name) != blocks.end(),
                         fmt::format("activation checkpointing: the model has no block '{}'", name),
                         "blocks: " + fmt::format("{}", fmt::join(blocks, ", ")));
  }
  checkpointed_ = std::set<std::string>(names.begin(), names.end());
}

const std::string& Checkpointable::block_name(std::size_t i) const {
  if (block_names_.empty()) block_names_ = checkpoint_blocks();
  BELLOWS_CHECK(i < block_names_.size(), fmt::format("block {} of {}", i, block_names_.size()), "report this bug");
  return block_names_[i];
}

void Checkpointable::set_block_hooks(std::shared_ptr<BlockHooks> hooks, const std::string& prefix) {
  hooks_ = std::move(hooks);
  hook_prefix_ = prefix;
}

std::vector<at::Tensor> Checkpointable::run_hooked(const std::string& name, torch::nn::Module& block, const BlockFunction& fn,
                                                   const std::vector<at::Tensor>& inputs) const {
  const auto run = [&] {
    if (!block.is_training() || !at::GradMode::is_enabled() || !checkpointed_.contains(name)) return fn(inputs);
    return checkpoint(fn, inputs, block.parameters());
  };
  if (!hooks_) return run();
  const std::string full = hook_prefix_ + name;
  hooks_->before_forward(full);
  std::vector<at::Tensor> outputs = run();
  bool backward_follows = false;
  if (at::GradMode::is_enabled()) {
    for (const auto& t : outputs) backward_follows = backward_follows || (t.defined() && t.requires_grad());
  }
  hooks_->after_forward(full, backward_follows);
  if (!backward_follows) return outputs;
  auto state = c10::make_intrusive<BeforeBackwardState>();
  state->hooks = hooks_;
  state->name = full;
  return BeforeBackwardFunction::apply(at::TensorList(outputs), state);
}

std::vector<at::Tensor> Checkpointable::run_block(const std::string& name, torch::nn::Module& block, const BlockFunction& fn,
                                                  const std::vector<at::Tensor>& inputs) const {
  return run_hooked(name, block, fn, inputs);
}

at::Tensor Checkpointable::run_block(const std::string& name, torch::nn::Module& block,
                                     const std::function<at::Tensor(const at::Tensor&)>& fn, const at::Tensor& x) const {
  if (!hooks_ && (!block.is_training() || !at::GradMode::is_enabled() || !checkpointed_.contains(name))) return fn(x);
  BlockFunction many = [fn](const std::vector<at::Tensor>& in) { return std::vector<at::Tensor>{fn(in[0])}; };
  return run_hooked(name, block, many, {x})[0];
}

std::vector<std::string> select_blocks(const std::vector<std::string>& patterns, const std::vector<std::string>& blocks,
                                       const std::string& key) {
  return select_names(patterns, blocks, key);
}

std::vector<std::string> apply_checkpointing(torch::nn::Module& model, const std::vector<std::string>& patterns) {
  auto* target = dynamic_cast<Checkpointable*>(&model);
  if (patterns.empty()) {
    if (target) target->set_checkpointed({});
    return {};
  }
  // A TorchScript model (models/scripted.h) runs as the interpreter's graph, which bellows cannot cut into blocks to
  // run again in the backward pass.
  const bool scripted = model.name() == "ScriptedModule";
  BELLOWS_CHECK_CONFIG(target != nullptr,
                       scripted ? std::string("checkpointing: a TorchScript model (model.name: torchscript) runs as one scripted "
                                              "program that bellows cannot split into blocks to recompute")
                                : fmt::format("checkpointing: model '{}' has no checkpointable blocks", model.name()),
                       scripted ? "remove the checkpointing key; to save memory, use a smaller data.batch_size with train.accumulation_steps"
                                : "remove the checkpointing key, or use a model with repeated blocks (transformer, resnet, gnn)");
  const auto names = select_blocks(patterns, target->checkpoint_blocks());
  target->set_checkpointed(names);
  return names;
}

}  // namespace bellows::models
