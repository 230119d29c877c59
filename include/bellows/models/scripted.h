// A user's own PyTorch model, saved as TorchScript (`torch.jit.script(model).save("m.pt")` or torch.jit.trace),
// as a torch::nn::Module the engine trains like a built-in one.
//
// The bridge: LibTorch loads the archive as a torch::jit::Module; ScriptedModule mirrors its module tree with
// plain nn::Modules that register the *same* tensors (not copies) under the Python attribute names, so
// named_parameters() gives "encoder.layer.0.attention.query.weight" as Python's state_dict does, and everything
// the engine does to parameters (to(device) and channels_last through set_data, the optimizer's in-place updates,
// checkpoint loads through copy_) is seen by the scripted code. train()/eval() reach the scripted module. The
// graphs' dropout and attention calls draw their masks with bellows' dropout (dropout.h), as the built-in models do.
//
// TorchScript is deprecated in PyTorch in favour of torch.export, which has no training path from C++ yet; a later
// loader of exported programs sits beside this one behind the same model entry (docs/models.md).
#pragma once

#include <ATen/core/ivalue.h>
#include <torch/csrc/jit/api/module.h>
#include <torch/nn/module.h>

#include <filesystem>
#include <string>
#include <vector>

#include "bellows/data/batch.h"  // defines: Batch

namespace bellows::models {

// How batch tensors meet a scripted method: `inputs` elements are "tensor" (passed by position, in order) or
// "argument=tensor" (by the argument's name); positional ones come first.
struct ScriptedInput {
  std::string argument;  // "" = positional
  std::string tensor;    // the batch tensor's name
};
std::vector<ScriptedInput> parse_scripted_inputs(const std::vector<std::string>& inputs, const std::string& key);

struct RoutedCalls {
  int dropout = 0;    // aten::dropout -> bellows::dropout
  int attention = 0;  // aten::scaled_dot_product_attention -> bellows::scaled_dot_product_attention
};

class ScriptedModule : public torch::nn::Module {
 public:
  // Loads `file`; kConfig errors name the file and say what it is instead (a directory, a pickled state_dict, a
  // safetensors file, a truncated archive). Checks that the module has trainable parameters, none of them float64.
  explicit ScriptedModule(const std::filesystem::path& file);

  // Checks `inputs` against the schema of `method` (count, argument names): kConfig error naming `key`.
  void check_inputs(const std::string& method, const std::vector<ScriptedInput>& inputs, const std::string& key) const;
  // Runs `method` on the batch's tensors. skip_absent: keyword inputs whose tensor the batch lacks are left out
  // (predictions have no labels); the argument must then have a default.
  c10::IValue run(const std::string& method, const std::vector<ScriptedInput>& inputs, const data::Batch& batch,
                  bool skip_absent = false);
  bool has_method(const std::string& method) const;
  // "forward(self, x: Tensor, mask: Optional[Tensor]=None) -> Tensor", for messages.
  std::string signature(const std::string& method) const;

  void train(bool on = true) override;
  // The parameters and buffers (the base class, through set_data) and the graphs' tensor constants: a traced
  // module bakes tensors that are not parameters or buffers into its graph on the tracing device, where
  // torch.jit.load's map_location would move them and Module::to does not. Before the first forward on `device`:
  // a graph that already ran keeps the constants it was planned with.
  void to(torch::Device device, torch::Dtype dtype, bool non_blocking = false) override;
  void to(torch::Device device, bool non_blocking = false) override;
  using torch::nn::Module::to;
  // How many tensor constants to(device) has moved so far (counted per graph, per move).
  int moved_constants() const { return moved_constants_; }
  torch::jit::Module& scripted() { return module_; }
  // The scripted graphs' call sites of aten::dropout and aten::scaled_dot_product_attention, now drawing their
  // dropout masks with models::dropout (dropout.h: parallel on the CPU unless dropout_masks is torch); counted once
  // per graph, as written, not per call.
  const RoutedCalls& routed_calls() const { return routed_; }
  const std::filesystem::path& file() const { return file_; }

 private:
  std::filesystem::path file_;
  torch::jit::Module module_;
  RoutedCalls routed_;
  int moved_constants_ = 0;
};

// Moves the tensor constants of every graph of `module` that have a dimension and live elsewhere to `device` (what
// ScriptedModule::to does besides the parameters); how many it moved. 0-dim constants stay: they combine with
// tensors of any device.
int move_tensor_constants(const torch::jit::Module& module, c10::Device device);

// The one output a task reads from what a scripted method returned: `key` "" takes a tensor as it is; an integer
// indexes a tuple or list; anything else is a dict key. kConfig error naming `config_key`, what was returned
// and what to set.
at::Tensor select_output(const c10::IValue& output, const std::string& key, const std::string& config_key);
// A value's type for messages: "Tensor", "tuple of 2 (Tensor, Tensor)", "dict with keys loss, logits".
std::string describe_value(const c10::IValue& value);

}  // namespace bellows::models
