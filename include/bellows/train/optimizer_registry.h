// The optimizer registry: each optimizer (adamw, adam, sgd, or a C++ user's) registers an OptimizerEntry from its own
// file (src/train/adam.cpp, sgd.cpp), like a model or a precision policy. The entry checks its options, names the
// state it may keep, and makes its UpdateRule (train/update_rule.h); train::Optimizer, the optim.type key's choices
// and the memory plan ask the entry, never the name, so a new optimizer is one file and one registration line.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "bellows/train/optimizer.h"    // defines: OptimizerOptions
#include "bellows/train/update_rule.h"  // defines: UpdateRule

namespace bellows::train {

// The hint of an entry's errors about its options.
inline constexpr const char* kOptimizerOptionsHint = "see the optim section of the configuration";

struct OptimizerEntry {
  std::string name;  // the config's word: optim.type: adamw
  std::string help;  // one line: what it computes
  int order = 0;     // place in listings (optim.type's choices): adamw 0, adam 1, sgd 2
  // Every kind of per-parameter state it may keep, whatever its options (the state dict's key prefixes: "exp_avg"):
  // a state dict entry of any registered optimizer's kinds is recognised by every optimizer.
  std::vector<std::string> state_kinds;
  // ATen has fused kernels for it (train::fused_kernel_available); false: optim.implementation auto runs the foreach
  // ops, and fused is a kConfig error.
  bool fused_kernels = true;
  // Its own checks of the options (kConfig errors naming the key), after the common ones (lr, weight decay).
  std::function<void(const OptimizerOptions&)> validate;
  // Its algorithm with these options.
  std::function<std::shared_ptr<const UpdateRule>(const OptimizerOptions&)> make;
};

std::vector<OptimizerEntry> optimizer_entries();  // in `order`
std::vector<std::string> optimizer_names();       // in `order`: adamw, adam, sgd
// kConfig error "optim.type is '<name>', an unknown optimizer" with the closest registered name.
const OptimizerEntry& find_optimizer(const std::string& name);
// State tensors the optimizer of these options keeps per trainable parameter (Adam's two moments, SGD's momentum
// buffer or none), for memory planning.
int optimizer_state_tensors(const OptimizerOptions& options);

// Registration, one static object per optimizer (in its own file):
//   const bellows::train::OptimizerRegistrar kMineOptimizerRegistered(mine_optimizer());
void register_optimizer(OptimizerEntry entry);  // kInternal error on a duplicate name
struct OptimizerRegistrar {
  explicit OptimizerRegistrar(OptimizerEntry entry) { register_optimizer(std::move(entry)); }
};

}  // namespace bellows::train
