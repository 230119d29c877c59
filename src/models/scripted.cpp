// A user's TorchScript module as an nn::Module; see scripted.h.
#include "bellows/models/scripted.h"

#include <ATen/ATen.h>
#include <caffe2/serialize/inline_container.h>
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <torch/csrc/jit/api/function_impl.h>
#include <torch/csrc/jit/ir/ir.h>
#include <torch/csrc/jit/serialization/import.h>
#include <torch/library.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <fstream>
#include <map>
#include <set>

#include "bellows/models/dropout.h"
#include "bellows/util/check.h"

namespace bellows::models {
namespace {

namespace fs = std::filesystem;

// bellows::dropout and bellows::scaled_dot_product_attention: ATen's schemas, models::dropout's masks (dropout.h:
// parallel on the CPU unless dropout_masks is torch; ATen's own operators elsewhere). CompositeImplicitAutograd:
// autograd and autocast see the operators they call, as they see ATen's own decompositions, so no backward of
// their own is needed. The scripted graphs' calls are pointed here when a module is loaded (route_to_bellows).

TORCH_LIBRARY(bellows, m) {
  m.def(torch::schema("bellows::dropout(Tensor input, float p, bool train) -> Tensor", c10::AliasAnalysisKind::FROM_SCHEMA));
  m.impl("dropout", c10::DispatchKey::CompositeImplicitAutograd, TORCH_FN(models::dropout));
  m.def(torch::schema("bellows::scaled_dot_product_attention(Tensor query, Tensor key, Tensor value, Tensor? attn_mask=None, "
                      "float dropout_p=0.0, bool is_causal=False, *, float? scale=None, bool enable_gqa=False) -> Tensor",
                      c10::AliasAnalysisKind::FROM_SCHEMA));
  m.impl("scaled_dot_product_attention", c10::DispatchKey::CompositeImplicitAutograd, TORCH_FN(models::scaled_dot_product_attention));
}

// aten::X (with the inputs of its one overload that bellows mirrors) -> bellows::X.
struct Route {
  c10::Symbol from, to;
  std::size_t inputs;
};

void route_to_bellows(torch::jit::Block* block, torch::jit::Graph& graph, RoutedCalls& routed) {
  static const std::array<Route, 2> kRoutes = {
      Route{c10::Symbol::fromQualString("aten::dropout"), c10::Symbol::fromQualString("bellows::dropout"), 3},
      Route{c10::Symbol::fromQualString("aten::scaled_dot_product_attention"),
            c10::Symbol::fromQualString("bellows::scaled_dot_product_attention"), 8}};
  for (auto it = block->nodes().begin(); it != block->nodes().end();) {
    torch::jit::Node* node = *it;
    ++it;  // before the node may be destroyed
    for (torch::jit::Block* inner : node->blocks()) route_to_bellows(inner, graph, routed);
    for (std::size_t r = 0; r < kRoutes.size(); ++r) {
      if (node->kind() != kRoutes[r].from || node->inputs().size() != kRoutes[r].inputs || node->outputs().size() != 1) continue;
      torch::jit::Node* ours = graph.create(kRoutes[r].to, node->inputs(), 1);
      ours->insertBefore(node);
      ours->output()->setType(node->output()->type());
      ours->output()->copyMetadata(node->output());
      node->output()->replaceAllUsesWith(ours->output());
      node->destroy();
      ++(r == 0 ? routed.dropout : routed.attention);
      break;
    }
  }
}

// Points every aten::dropout and aten::scaled_dot_product_attention call of every function of the module's
// compilation unit at bellows' operators: the methods and the free functions they call (nn.Dropout's forward calls
// torch.nn.functional.dropout, a function of its own in a scripted file: prim::CallFunction), before anything has
// run (a function's executor plans from its graph on the first call). Methods of one class share a graph: each
// graph is rewritten once. Dropout2d/3d (aten::feature_dropout) and other attention kernels stay ATen's.
// Calls fn(function) once for every graph function of the module: those of its compilation unit (the methods and
// the free functions they call) and, in case a class's methods live in another unit, every module's methods.
// Methods of one class share a function.
template <typename Fn>
void for_each_graph_function(const torch::jit::Module& root, Fn&& fn) {
  std::set<const torch::jit::Function*> done;
  auto visit = [&](torch::jit::Function& f) {
    if (f.isGraphFunction() && done.insert(&f).second) fn(torch::jit::toGraphFunction(f));
  };
  for (torch::jit::Function* f : root._ivalue()->compilation_unit()->get_functions()) visit(*f);
  for (const torch::jit::Module& m : root.modules()) {
    for (const torch::jit::Method& method : m.get_methods()) visit(method.function());
  }
}

RoutedCalls route_to_bellows(const torch::jit::Module& root) {
  std::set<const torch::jit::Graph*> done;
  RoutedCalls routed;
  for_each_graph_function(root, [&](torch::jit::GraphFunction& f) {
    const std::shared_ptr<torch::jit::Graph> graph = f.graph();
    if (done.insert(graph.get()).second) route_to_bellows(graph->block(), *graph, routed);
  });
  return routed;
}

int move_block_constants(torch::jit::Block* block, c10::Device device) {
  int moved = 0;
  for (torch::jit::Node* node : block->nodes()) {
    for (torch::jit::Block* inner : node->blocks()) moved += move_block_constants(inner, device);
    if (node->kind() != c10::prim::Constant || !node->hasAttribute(c10::attr::value) ||
        node->kindOf(c10::attr::value) != torch::jit::AttributeKind::t) {
      continue;
    }
    const at::Tensor t = node->t(c10::attr::value);
    if (t.dim() == 0 || t.device() == device) continue;
    const at::Tensor there = t.to(device);
    node->t_(c10::attr::value, there);
    node->output()->inferTypeFrom(there);
    ++moved;
  }
  return moved;
}


// The first line of a LibTorch error (its text goes on with a C++ backtrace).
std::string first_line(const std::string& text) {
  const auto end = text.find('\n');
  return end == std::string::npos ? text : text.substr(0, end);
}

// What a file that is not TorchScript is instead, from its first bytes and, for a zip archive, its records
// ("" when it looks like a TorchScript archive). torch.jit.save writes a zip archive with code/ and constants.pkl;
// torch.save writes one with data.pkl and no code (a pickled state_dict or module); safetensors files start with
// an 8-byte little-endian header length and a JSON object.
std::string what_instead(const fs::path& file) {
  std::ifstream in(file, std::ios::binary);
  std::array<char, 9> head{};
  in.read(head.data(), head.size());
  const auto got = in.gcount();
  if (got >= 4 && head[0] == 'P' && head[1] == 'K' && head[2] == '\x03' && head[3] == '\x04') {
    std::vector<std::string> records;
    try {
      caffe2::serialize::PyTorchStreamReader reader(file.string());
      records = reader.getAllRecords();
    } catch (const c10::Error& e) {
      return fmt::format("a damaged or truncated zip archive ({})", first_line(e.what_without_backtrace()));
    }
    const bool code = std::any_of(records.begin(), records.end(), [](const std::string& r) { return r.rfind("code/", 0) == 0; });
    if (code) return "";
    const bool pickle = std::find(records.begin(), records.end(), "data.pkl") != records.end();
    return pickle ? "an archive written by torch.save (a pickled state_dict or module): it holds tensors but no TorchScript code"
                  : "a zip archive without TorchScript code";
  }
  if (got == 9 && head[8] == '{') return "a safetensors file: weights without the model's code";
  if (got >= 2 && head[0] == '\x80') return "a Python pickle (torch.save's legacy format): it holds no TorchScript code";
  return "not a TorchScript archive (not a zip archive)";
}

constexpr const char* kScriptHint =
    "save the model as TorchScript in Python: torch.jit.script(model).save(\"model.pt\") (or torch.jit.trace(model, "
    "example_inputs).save(...)); docs/models.md \"Your own model\"";

torch::jit::Module load_archive(const fs::path& file) {
  BELLOWS_CHECK_CONFIG(fs::exists(file), fmt::format("model.path {} does not exist", file.string()),
                       "set model.path to a TorchScript file (relative paths resolve against the config file)");
  BELLOWS_CHECK_CONFIG(!fs::is_directory(file), fmt::format("model.path {} is a directory, expected a TorchScript file", file.string()),
                       kScriptHint);
  const std::string instead = what_instead(file);
  BELLOWS_CHECK_CONFIG(instead.empty(), fmt::format("model.path {} is {}, expected a TorchScript archive", file.string(), instead),
                       kScriptHint);
  try {
    return torch::jit::load(file.string(), c10::Device(c10::kCPU));
  } catch (const c10::Error& e) {
    BELLOWS_FAIL(ErrorKind::kConfig,
                 fmt::format("model.path {}: LibTorch could not load the TorchScript archive: {}", file.string(),
                             first_line(e.what_without_backtrace())),
                 "save it again with torch.jit.save from PyTorch 2.x; a module using custom C++ operators needs them loaded");
  }
}

std::string type_name(const torch::jit::Module& m) {
  const auto& qualified = m.type()->name();
  return qualified ? qualified->name() : "ScriptModule";
}

// Registers the scripted module's own parameters and buffers (the same tensors) on `node` and mirrors its
// children below it, recursively; `seen` finds a tensor registered twice (tied weights).
void mirror(torch::nn::Module& node, const torch::jit::Module& scripted, const std::string& prefix,
            std::map<const c10::TensorImpl*, std::string>& seen, const fs::path& file) {
  auto note = [&](const std::string& name, const at::Tensor& t) {
    const auto [it, inserted] = seen.emplace(t.unsafeGetTensorImpl(), prefix + name);
    BELLOWS_CHECK_CONFIG(inserted,
                         fmt::format("model.path {}: {} and {} are the same tensor (tied weights); bellows does not train tied "
                                     "parameters of a scripted module yet",
                                     file.string(), it->second, prefix + name),
                         "untie them before scripting (give the second its own nn.Parameter), or use a model without them");
  };
  for (const auto& p : scripted.named_parameters(/*recurse=*/false)) {
    if (!p.value.defined()) continue;
    note(p.name, p.value);
    node.register_parameter(p.name, p.value, p.value.requires_grad());
  }
  for (const auto& b : scripted.named_buffers(/*recurse=*/false)) {
    if (!b.value.defined()) continue;
    note(b.name, b.value);
    node.register_buffer(b.name, b.value);
  }
  for (const auto& c : scripted.named_children()) {
    auto child = std::make_shared<torch::nn::Module>(type_name(c.value));
    mirror(*child, c.value, prefix + c.name + ".", seen, file);
    node.register_module(c.name, child);
  }
}

const c10::FunctionSchema& schema_of(const torch::jit::Module& m, const std::string& method) {
  return m.get_method(method).function().getSchema();
}

}  // namespace

// The tensor constants of the graphs go where the parameters go. torch.jit.trace bakes every tensor that is neither
// a parameter, a buffer nor an input (a positional table kept as a plain attribute, say) into the graph as a
// constant on the device it was traced on; torch.jit.load's map_location moves them, Module::to does not, so a
// module traced on the CPU and moved to a GPU would mix devices in its first forward. 0-dim constants stay: they
// combine with tensors of any device. The lazily optimised copies of the graphs are dropped so that the executors,
// created on the first call, plan from the moved constants (a function that already ran keeps its plan).
int move_tensor_constants(const torch::jit::Module& root, c10::Device device) {
  std::set<const torch::jit::Graph*> done;
  int moved = 0;
  for_each_graph_function(root, [&](torch::jit::GraphFunction& f) {
    const std::shared_ptr<torch::jit::Graph> graph = f.graph();
    if (done.insert(graph.get()).second) moved += move_block_constants(graph->block(), device);
    f.clear_optimized_graphs();
  });
  return moved;
}

std::vector<ScriptedInput> parse_scripted_inputs(const std::vector<std::string>& inputs, const std::string& key) {
  std::vector<ScriptedInput> out;
  bool keywords = false;
  for (const std::string& item : inputs) {
    const auto eq = item.find('=');
    ScriptedInput in;
    if (eq == std::string::npos) {
      in.tensor = item;
    } else {
      in.argument = item.substr(0, eq);
      in.tensor = item.substr(eq + 1);
      BELLOWS_CHECK_CONFIG(!in.argument.empty(), fmt::format("{}: '{}' has no argument name before '='", key, item),
                           "write argument=tensor, e.g. mask=mask");
    }
    BELLOWS_CHECK_CONFIG(!in.tensor.empty(), fmt::format("{}: '{}' names no batch tensor", key, item),
                         "name a tensor of the batch: x, y, or an array of the data");
    BELLOWS_CHECK_CONFIG(!(keywords && in.argument.empty()),
                         fmt::format("{}: positional input '{}' after a keyword input", key, item),
                         "list the inputs passed by position first, then argument=tensor ones");
    keywords = keywords || !in.argument.empty();
    out.push_back(std::move(in));
  }
  BELLOWS_CHECK_CONFIG(!out.empty(), fmt::format("{} is empty", key), "name the batch tensors forward() takes, e.g. [x]");
  return out;
}

ScriptedModule::ScriptedModule(const fs::path& file) : torch::nn::Module("ScriptedModule"), file_(file), module_(load_archive(file)) {
  std::map<const c10::TensorImpl*, std::string> seen;
  mirror(*this, module_, "", seen, file_);
  routed_ = route_to_bellows(module_);
  bool trainable = false;
  for (const auto& p : named_parameters()) {
    BELLOWS_CHECK_CONFIG(!p.value().is_floating_point() || p.value().scalar_type() == at::kFloat,
                         fmt::format("model.path {}: parameter {} is {}, expected float32", file_.string(), p.key(),
                                     c10::toString(p.value().scalar_type())),
                         "bellows keeps float32 weights and runs lower precisions through precision: (bf16-mixed, fp16-mixed); "
                         "call model.float() before scripting");
    trainable = trainable || p.value().requires_grad();
  }
  BELLOWS_CHECK_CONFIG(trainable, fmt::format("model.path {}: the module has no trainable parameters", file_.string()),
                       "script a module with nn.Parameters that require gradients (a frozen or parameter-free module has "
                       "nothing to train)");
  BELLOWS_CHECK_CONFIG(module_.find_method("forward").has_value(),
                       fmt::format("model.path {}: the scripted module has no forward method", file_.string()), kScriptHint);
  train(true);
}

bool ScriptedModule::has_method(const std::string& method) const { return module_.find_method(method).has_value(); }

std::string ScriptedModule::signature(const std::string& method) const {
  const auto& s = schema_of(module_, method);
  std::vector<std::string> args;
  for (const auto& a : s.arguments()) {
    if (a.name() == "self") continue;
    std::string text = fmt::format("{}: {}", a.name(), a.type()->annotation_str());
    if (a.default_value()) text += "=...";
    args.push_back(text);
  }
  std::vector<std::string> returns;
  for (const auto& r : s.returns()) returns.push_back(r.type()->annotation_str());
  return fmt::format("{}({}) -> {}", method, fmt::join(args, ", "), returns.size() == 1 ? returns[0] : fmt::format("({})", fmt::join(returns, ", ")));
}

void ScriptedModule::check_inputs(const std::string& method, const std::vector<ScriptedInput>& inputs, const std::string& key) const {
  const auto& all = schema_of(module_, method).arguments();
  std::vector<const c10::Argument*> args;
  for (const auto& a : all) {
    if (a.name() != "self") args.push_back(&a);
  }
  const std::string where = fmt::format("model.path {}: {}", file_.string(), signature(method));
  std::size_t positional = 0;
  std::set<std::string> given;
  for (const auto& in : inputs) {
    if (!in.argument.empty()) continue;
    BELLOWS_CHECK_CONFIG(positional < args.size() && !args[positional]->kwarg_only(),
                         fmt::format("{} takes {} input(s) by position, {} passes more", where, args.size(), key),
                         fmt::format("set {} to one batch tensor per argument", key));
    given.insert(args[positional]->name());
    ++positional;
  }
  for (const auto& in : inputs) {
    if (in.argument.empty()) continue;
    const auto it = std::find_if(args.begin(), args.end(), [&](const c10::Argument* a) { return a->name() == in.argument; });
    std::vector<std::string> names;
    for (const auto* a : args) names.push_back(a->name());
    BELLOWS_CHECK_CONFIG(it != args.end(), fmt::format("{} has no argument '{}' ({} names it)", where, in.argument, key),
                         fmt::format("its arguments are: {}", fmt::join(names, ", ")));
    BELLOWS_CHECK_CONFIG(given.insert(in.argument).second, fmt::format("{} gives argument '{}' twice", key, in.argument),
                         "give each argument one tensor");
  }
  for (const auto* a : args) {
    BELLOWS_CHECK_CONFIG(given.count(a->name()) > 0 || a->default_value().has_value(),
                         fmt::format("{}: argument '{}' has no default and {} gives it no batch tensor", where, a->name(), key),
                         fmt::format("add it to {} (by position, or as {}=TENSOR)", key, a->name()));
  }
}

c10::IValue ScriptedModule::run(const std::string& method, const std::vector<ScriptedInput>& inputs, const data::Batch& batch,
                                bool skip_absent) {
  std::vector<c10::IValue> args;
  torch::jit::Kwargs kwargs;
  for (const auto& in : inputs) {
    const auto it = batch.tensors.find(in.tensor);
    if (it == batch.tensors.end() && skip_absent && !in.argument.empty()) continue;
    const at::Tensor& t = batch.at(in.tensor);
    if (in.argument.empty()) {
      args.emplace_back(t);
    } else {
      kwargs.emplace(in.argument, t);
    }
  }
  return module_.get_method(method)(std::move(args), kwargs);
}

void ScriptedModule::train(bool on) {
  torch::nn::Module::train(on);
  module_.train(on);
}

void ScriptedModule::to(torch::Device device, torch::Dtype dtype, bool non_blocking) {
  torch::nn::Module::to(device, dtype, non_blocking);
  moved_constants_ += move_tensor_constants(module_, device);
}

void ScriptedModule::to(torch::Device device, bool non_blocking) {
  torch::nn::Module::to(device, non_blocking);
  moved_constants_ += move_tensor_constants(module_, device);
}

std::string describe_value(const c10::IValue& value) {
  if (value.isTensor()) return "Tensor";
  if (value.isTuple() || value.isList()) {
    std::vector<c10::IValue> elements;
    if (value.isTuple()) {
      for (const auto& e : value.toTupleRef().elements()) elements.push_back(e);
    } else {
      for (const auto& e : value.toListRef()) elements.push_back(e);
    }
    std::vector<std::string> kinds;
    for (const auto& e : elements) kinds.push_back(e.isTensor() ? "Tensor" : e.tagKind());
    return fmt::format("{} of {} ({})", value.isTuple() ? "tuple" : "list", elements.size(), fmt::join(kinds, ", "));
  }
  if (value.isGenericDict()) {
    std::vector<std::string> keys;
    for (const auto& entry : value.toGenericDict()) keys.push_back(entry.key().isString() ? entry.key().toStringRef() : entry.key().tagKind());
    return fmt::format("dict with keys {}", fmt::join(keys, ", "));
  }
  return value.tagKind();
}

at::Tensor select_output(const c10::IValue& output, const std::string& key, const std::string& config_key) {
  auto fail = [&](const std::string& why, const std::string& hint) {
    BELLOWS_FAIL(ErrorKind::kConfig, fmt::format("{} is '{}', but the model returned a {}: {}", config_key, key, describe_value(output), why), hint);
  };
  if (key.empty()) {
    if (output.isTensor()) return output.toTensor();
    fail("a tensor was expected", fmt::format("set {} to the element to use (an index of a tuple, a key of a dict)", config_key));
  }
  if (output.isGenericDict()) {
    for (const auto& entry : output.toGenericDict()) {
      if (entry.key().isString() && entry.key().toStringRef() == key) {
        if (entry.value().isTensor()) return entry.value().toTensor();
        fail(fmt::format("entry '{}' is {}, not a tensor", key, entry.value().tagKind()), "name an entry that holds a tensor");
      }
    }
    fail(fmt::format("it has no entry '{}'", key), fmt::format("set {} to one of its keys", config_key));
  }
  if (output.isTuple() || output.isList()) {
    std::size_t used = 0;
    std::int64_t index = -1;
    try {
      index = std::stoll(key, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (used != key.size() || index < 0) fail("a tuple takes an index", fmt::format("set {} to 0, 1, ...", config_key));
    const std::size_t size = output.isTuple() ? output.toTupleRef().elements().size() : output.toListRef().size();
    if (static_cast<std::size_t>(index) >= size) fail(fmt::format("index {} is out of range", index), fmt::format("set {} below {}", config_key, size));
    const c10::IValue& element = output.isTuple() ? output.toTupleRef().elements()[index] : output.toListRef()[index];
    if (element.isTensor()) return element.toTensor();
    fail(fmt::format("element {} is {}, not a tensor", index, element.tagKind()), "name an element that holds a tensor");
  }
  if (output.isTensor()) fail("a single tensor has no elements", fmt::format("leave {} empty", config_key));
  fail("expected a tensor, a tuple or a dict of tensors", "return tensors from the scripted method");
  return {};
}

}  // namespace bellows::models
