// The TorchScript bridge (models/scripted.h): the mirrored module tree shares the scripted module's tensors under
// the Python names, train()/eval() reach the scripted code, autocast covers the interpreter's operators, and the
// input/output plumbing checks what the config says against the scripted schema. The modules are built in C++
// (torch::jit::Module::define), saved and loaded back as a user's file would be.
#include "bellows/models/scripted.h"

#include <gtest/gtest.h>

#include <ATen/ATen.h>
#include <torch/csrc/jit/api/module.h>
#include <torch/csrc/jit/ir/ir.h>
#include <torch/csrc/jit/runtime/graph_executor.h>
#include <torch/csrc/jit/serialization/import.h>
#include <torch/utils.h>

#include <algorithm>
#include <filesystem>

#include "bellows/models/dropout.h"
#include "bellows/obs/profile.h"  // defines: FlopCounter
#include "bellows/precision/autocast.h"
#include "bellows/util/error.h"

namespace bellows::models {
namespace {

namespace fs = std::filesystem;

// A two-level module: "enc" (a Linear's weight and bias, a buffer) and a head weight; forward(x, scale=1.0),
// forward's training flag visible through `mode()`, and a loss method for autocast's fp32 list.
fs::path write_module(const std::string& name) {
  torch::jit::Module enc("Enc");
  enc.register_attribute("training", c10::BoolType::get(), true);  // what every module saved from Python has
  enc.register_parameter("weight", at::randn({8, 4}).requires_grad_(), false);
  enc.register_parameter("bias", at::zeros({8}).requires_grad_(), false);
  enc.register_buffer("running", at::ones({8}));
  enc.define(R"JIT(
def forward(self, x):
    return torch.relu(torch.mm(x, self.weight.t()) + self.bias) * self.running
)JIT");
  torch::jit::Module m("Net");
  m.register_attribute("training", c10::BoolType::get(), true);
  m.register_module("enc", enc);
  m.register_parameter("head", at::randn({2, 8}).requires_grad_(), false);
  m.define(R"JIT(
def forward(self, x, scale: float = 1.0):
    return torch.mm(self.enc.forward(x), self.head.t()) * scale

def mode(self) -> bool:
    return self.training

def pair(self, x):
    return torch.mm(x, self.enc.weight.t()), {"loss": torch.mse_loss(x, x * 2.0)}
)JIT");
  const fs::path path = fs::path(::testing::TempDir()) / (name + ".pt");
  m.save(path.string());
  return path;
}

TEST(Scripted, ParametersAndBuffersKeepThePythonNamesAndAreTheSameTensors) {
  ScriptedModule m(write_module("names"));
  std::vector<std::string> names;
  for (const auto& p : m.named_parameters()) names.push_back(p.key());
  EXPECT_EQ(names, (std::vector<std::string>{"head", "enc.weight", "enc.bias"}));
  EXPECT_EQ(m.named_buffers().size(), 1u);
  EXPECT_TRUE(m.named_buffers().contains("enc.running"));
  // The same TensorImpl: what the engine does through set_data (to(device), channels_last) and in place (the
  // optimizer) is what the scripted code computes with.
  const at::Tensor w = m.named_parameters()["enc.weight"];
  EXPECT_EQ(w.unsafeGetTensorImpl(), m.scripted().attr("enc").toModule().attr("weight").toTensor().unsafeGetTensorImpl());
  {
    at::NoGradGuard no_grad;
    w.zero_();
  }
  data::Batch b;
  b.tensors["x"] = at::randn({3, 4});
  const at::Tensor out = m.run("forward", {{"", "x"}}, b).toTensor();
  EXPECT_TRUE(out.eq(0).all().item<bool>());  // relu(0 + 0) * ... = 0
  EXPECT_TRUE(m.named_parameters()["head"].requires_grad());
}

TEST(Scripted, TrainAndEvalReachTheScriptedModule) {
  ScriptedModule m(write_module("mode"));
  data::Batch none;
  EXPECT_TRUE(m.run("mode", {}, none).toBool());
  m.eval();
  EXPECT_FALSE(m.run("mode", {}, none).toBool());
  EXPECT_FALSE(m.scripted().attr("enc").toModule().is_training());
  m.train();
  EXPECT_TRUE(m.run("mode", {}, none).toBool());
}

TEST(Scripted, AutocastCoversTheInterpretersOperators) {
  torch::jit::GraphOptimizerEnabledGuard optimize(false);  // model.jit_optimize's default
  ScriptedModule m(write_module("autocast"));
  data::Batch b;
  b.tensors["x"] = at::randn({3, 4});
  precision::AutocastGuard guard(c10::kCPU, at::kBFloat16);
  const c10::IValue out = m.run("pair", {{"", "x"}}, b);
  EXPECT_EQ(select_output(out, "0", "k").scalar_type(), at::kBFloat16);  // mm: autocast's lower-precision list
  const c10::IValue loss = out.toTupleRef().elements()[1];
  EXPECT_EQ(select_output(loss, "loss", "k").scalar_type(), at::kFloat);  // mse_loss: its fp32 list
  EXPECT_EQ(m.run("forward", {{"", "x"}}, b).toTensor().scalar_type(), at::kBFloat16);
}

// Two submodules with a dropout each (built in C++, each has a class and a graph of its own; Python's scripting
// shares one between identical submodules), a dropout inside an `if` block in forward.
fs::path write_dropout_module(const std::string& name) {
  auto block = [] {
    torch::jit::Module b("Block");
    b.register_attribute("training", c10::BoolType::get(), true);
    b.register_parameter("weight", at::randn({6, 6}).requires_grad_(), false);
    b.define(R"JIT(
def forward(self, x):
    return torch.dropout(torch.mm(x, self.weight), 0.25, self.training)
)JIT");
    return b;
  };
  torch::jit::Module m("Net");
  m.register_attribute("training", c10::BoolType::get(), true);
  m.register_module("a", block());
  m.register_module("b", block());
  m.define(R"JIT(
def forward(self, x, twice: bool = True):
    h = self.b.forward(self.a.forward(x))
    if twice:
        h = torch.dropout(h, 0.5, self.training)
    return h
)JIT");
  const fs::path path = fs::path(::testing::TempDir()) / (name + ".pt");
  m.save(path.string());
  return path;
}

bool graph_has(torch::jit::Block* block, const char* kind) {
  for (torch::jit::Node* n : block->nodes()) {
    if (n->kind() == c10::Symbol::fromQualString(kind)) return true;
    for (torch::jit::Block* inner : n->blocks()) {
      if (graph_has(inner, kind)) return true;
    }
  }
  return false;
}

TEST(Scripted, DropoutCallsDrawBellowsMasksOrAtensWithDropoutMasksTorch) {
  const DropoutMasks saved = dropout_masks();
  torch::jit::GraphOptimizerEnabledGuard optimize(false);
  ScriptedModule m(write_dropout_module("dropout"));
  EXPECT_EQ(m.routed_calls().dropout, 3) << "each block's graph, and forward's `if` branch";
  for (const auto& method : {m.scripted().get_method("forward"), m.scripted().attr("a").toModule().get_method("forward")}) {
    EXPECT_FALSE(graph_has(method.graph()->block(), "aten::dropout"));
    EXPECT_TRUE(graph_has(method.graph()->block(), "bellows::dropout"));
  }
  data::Batch b;
  b.tensors["x"] = at::randn({5, 6});
  const at::Tensor wa = m.named_parameters()["a.weight"], wb = m.named_parameters()["b.weight"];
  // What forward computes, written with the same functions in C++: the same seed gives the same output.
  auto reference = [&] {
    return models::dropout(models::dropout(at::mm(models::dropout(at::mm(b.tensors["x"], wa), 0.25, true), wb), 0.25, true), 0.5, true);
  };
  for (DropoutMasks masks : {DropoutMasks::kParallel, DropoutMasks::kTorch}) {
    set_dropout_masks(masks);
    torch::manual_seed(11);
    const at::Tensor out = m.run("forward", {{"", "x"}}, b).toTensor();
    torch::manual_seed(11);
    EXPECT_TRUE(out.equal(reference())) << (masks == DropoutMasks::kTorch ? "torch" : "parallel");
    out.sum().backward();  // gradients flow through the masks
    EXPECT_TRUE(wa.grad().defined() && wa.grad().ne(0).any().item<bool>());
    wa.mutable_grad().reset();
    wb.mutable_grad().reset();
  }
  // kTorch is at::dropout itself: PyTorch's draws bit for bit.
  torch::manual_seed(11);
  const at::Tensor ours = m.run("forward", {{"", "x"}}, b).toTensor();
  torch::manual_seed(11);
  const at::Tensor aten = at::dropout(at::dropout(at::mm(at::dropout(at::mm(b.tensors["x"], wa), 0.25, true), wb), 0.25, true), 0.5, true);
  EXPECT_TRUE(ours.equal(aten));
  set_dropout_masks(DropoutMasks::kParallel);
  torch::manual_seed(11);
  EXPECT_FALSE(m.run("forward", {{"", "x"}}, b).toTensor().equal(aten)) << "parallel masks are other draws";
  m.eval();
  EXPECT_TRUE(m.run("forward", {{"", "x"}}, b).toTensor().equal(at::mm(at::mm(b.tensors["x"], wa), wb)));
  set_dropout_masks(saved);
}

TEST(Scripted, AttentionCallsDrawTheirDropoutWithBellowsMasks) {
  const DropoutMasks saved = dropout_masks();
  torch::jit::GraphOptimizerEnabledGuard optimize(false);
  torch::jit::Module m("Attn");
  m.register_attribute("training", c10::BoolType::get(), true);
  m.register_parameter("wq", at::randn({4, 4}).requires_grad_(), false);
  m.define(R"JIT(
def forward(self, x):
    q = torch.matmul(x, self.wq).unsqueeze(1)
    p = 0.5 if self.training else 0.0
    return torch.scaled_dot_product_attention(q, q, q, None, p)
)JIT");
  const fs::path path = fs::path(::testing::TempDir()) / "attention.pt";
  m.save(path.string());
  ScriptedModule s(path);
  EXPECT_EQ(s.routed_calls().attention, 1);
  EXPECT_EQ(s.routed_calls().dropout, 0);
  data::Batch b;
  b.tensors["x"] = at::randn({3, 7, 4});
  const at::Tensor wq = s.named_parameters()["wq"];
  const at::Tensor q = at::matmul(b.tensors["x"], wq).unsqueeze(1);
  for (DropoutMasks masks : {DropoutMasks::kParallel, DropoutMasks::kTorch}) {
    set_dropout_masks(masks);
    torch::manual_seed(5);
    const at::Tensor out = s.run("forward", {{"", "x"}}, b).toTensor();
    torch::manual_seed(5);
    const at::Tensor want = masks == DropoutMasks::kTorch ? at::scaled_dot_product_attention(q, q, q, std::nullopt, 0.5)
                                                          : models::scaled_dot_product_attention(q, q, q, std::nullopt, 0.5);
    EXPECT_TRUE(out.equal(want)) << (masks == DropoutMasks::kTorch ? "torch" : "parallel");
  }
  set_dropout_masks(saved);
}

// A traced module's tensor constant (what torch.jit.trace makes of a tensor that is neither a parameter nor a
// buffer) moves with the module, as torch.jit.load's map_location would move it; a 0-dim one stays. The meta device
// stands in for a GPU (set_data, which moves the parameters, refuses meta, so the graph here reads none): a CPU
// constant in a meta forward is a device mismatch, as it is on CUDA.
TEST(Scripted, TensorConstantsOfTheGraphsMoveWithTheModule) {
  torch::jit::Module m("Traced");
  m.register_attribute("training", c10::BoolType::get(), true);
  m.register_parameter("weight", at::randn({4, 4}).requires_grad_(), false);
  m.define(R"JIT(
def forward(self, x):
    return x * 1.0
)JIT");
  {
    const std::shared_ptr<torch::jit::Graph> graph = m.get_method("forward").graph();
    torch::jit::WithInsertPoint here(graph->return_node());
    torch::jit::Value* table = graph->insertConstant(at::arange(4.0).reshape({1, 4}));  // x + table * 2 (0-dim)
    torch::jit::Value* two = graph->insertConstant(at::scalar_tensor(2.0));
    torch::jit::Value* scaled = graph->insert(c10::aten::mul, {table, two});
    graph->return_node()->replaceInput(0, graph->insert(c10::aten::add, {graph->outputs()[0], scaled}));
  }
  const fs::path path = fs::path(::testing::TempDir()) / "traced_constant.pt";
  m.save(path.string());
  const at::Tensor meta_x = at::zeros({3, 4}, at::TensorOptions().device(c10::kMeta));
  auto constant_devices = [](torch::jit::Module& module) {
    std::vector<c10::Device> devices;
    for (torch::jit::Node* node : module.get_method("forward").graph()->nodes()) {
      if (node->kind() == c10::prim::Constant && node->kindOf(c10::attr::value) == torch::jit::AttributeKind::t) {
        devices.push_back(node->t(c10::attr::value).device());
      }
    }
    return devices;
  };

  torch::jit::Module stays = torch::jit::load(path.string(), c10::Device(c10::kCPU));
  try {  // what a traced module did on a GPU before
    stays.forward({meta_x});
    ADD_FAILURE() << "a CPU constant in a meta forward ran";
  } catch (const std::exception& e) {
    EXPECT_NE(std::string(e.what()).find("Expected all tensors to be on the same device"), std::string::npos) << e.what();
  }

  torch::jit::Module moved = torch::jit::load(path.string(), c10::Device(c10::kCPU));
  EXPECT_EQ(move_tensor_constants(moved, c10::Device(c10::kMeta)), 1);  // the table; the 0-dim 2 stays on the CPU
  const std::vector<c10::Device> devices = constant_devices(moved);
  EXPECT_EQ(devices.size(), 2u);
  EXPECT_EQ(std::count(devices.begin(), devices.end(), c10::Device(c10::kMeta)), 1);
  const at::Tensor out = moved.forward({meta_x}).toTensor();
  EXPECT_TRUE(out.is_meta());
  EXPECT_EQ(out.sizes(), (std::vector<int64_t>{3, 4}));

  // Through the module: on the CPU nothing moves and the forward computes x + table * 2.
  ScriptedModule cpu(path);
  cpu.to(c10::Device(c10::kCPU));
  EXPECT_EQ(cpu.moved_constants(), 0);
  data::Batch b;
  b.tensors["x"] = at::ones({3, 4});
  EXPECT_TRUE(cpu.run("forward", {{"", "x"}}, b).toTensor().equal(at::ones({3, 4}) + at::arange(4.0).reshape({1, 4}) * 2));
}

TEST(Scripted, InputsAreCheckedAgainstTheSchema) {
  ScriptedModule m(write_module("inputs"));
  EXPECT_EQ(m.signature("forward"), "forward(x: Tensor, scale: float=...) -> Tensor");
  EXPECT_NO_THROW(m.check_inputs("forward", parse_scripted_inputs({"x"}, "k"), "k"));
  EXPECT_NO_THROW(m.check_inputs("forward", parse_scripted_inputs({"x=a"}, "k"), "k"));
  auto fails = [&](std::vector<std::string> inputs, const std::string& fragment) {
    try {
      m.check_inputs("forward", parse_scripted_inputs(inputs, "model.inputs"), "model.inputs");
      ADD_FAILURE() << "no error for " << inputs.size() << " inputs";
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::kConfig);
      EXPECT_NE(std::string(e.what()).find(fragment), std::string::npos) << e.what();
    }
  };
  fails({"x", "y", "z"}, "takes 2 input(s) by position, model.inputs passes more");
  fails({"scale=s"}, "argument 'x' has no default and model.inputs gives it no batch tensor");
  fails({"x", "x=a"}, "gives argument 'x' twice");
  fails({"x", "nope=a"}, "has no argument 'nope'");
  EXPECT_THROW(parse_scripted_inputs({"x=a", "y"}, "k"), Error);  // positional after keyword
  EXPECT_THROW(parse_scripted_inputs({"=a"}, "k"), Error);
  EXPECT_THROW(parse_scripted_inputs({}, "k"), Error);
}

TEST(Scripted, OutputsAreSelectedByIndexOrKey) {
  const at::Tensor a = at::ones({1}), b = at::zeros({1});
  const c10::IValue tuple = c10::ivalue::Tuple::create({a, b});
  EXPECT_TRUE(select_output(tuple, "1", "k").equal(b));
  c10::Dict<std::string, at::Tensor> dict;
  dict.insert("logits", a);
  EXPECT_TRUE(select_output(c10::IValue(dict), "logits", "k").equal(a));
  EXPECT_TRUE(select_output(c10::IValue(a), "", "k").equal(a));
  EXPECT_EQ(describe_value(tuple), "tuple of 2 (Tensor, Tensor)");
  EXPECT_EQ(describe_value(c10::IValue(dict)), "dict with keys logits");
  EXPECT_THROW(select_output(tuple, "2", "k"), Error);
  EXPECT_THROW(select_output(tuple, "", "k"), Error);
  EXPECT_THROW(select_output(c10::IValue(dict), "loss", "k"), Error);
  EXPECT_THROW(select_output(c10::IValue(a), "0", "k"), Error);
}

// A user's 1-D CNN as scripted from Python (nn.Conv1d(3, 16, 5, padding=2), BatchNorm1d, ReLU, mean over time,
// nn.Linear(16, 4)), trained one step on a [64, 3, 64] batch: the FLOP counter counts what it computes. Its Conv1d
// read 0 (LibTorch's profiler counts aten::conv2d only), about 1000x too few FLOPs for such a model.
TEST(Scripted, AConv1dModelsTrainingStepCountsItsConvolutionsAndProducts) {
  torch::jit::Module m("Cnn");
  m.register_attribute("training", c10::BoolType::get(), true);
  m.register_parameter("conv_weight", at::randn({16, 3, 5}).requires_grad_(), false);
  m.register_parameter("conv_bias", at::zeros({16}).requires_grad_(), false);
  m.register_parameter("bn_weight", at::ones({16}).requires_grad_(), false);
  m.register_parameter("bn_bias", at::zeros({16}).requires_grad_(), false);
  m.register_buffer("running_mean", at::zeros({16}));
  m.register_buffer("running_var", at::ones({16}));
  m.register_parameter("head_weight", at::randn({4, 16}).requires_grad_(), false);
  m.register_parameter("head_bias", at::zeros({4}).requires_grad_(), false);
  m.define(R"JIT(
def forward(self, signal):
    h = torch.conv1d(signal, self.conv_weight, self.conv_bias, [1], [2])
    h = torch.batch_norm(h, self.bn_weight, self.bn_bias, self.running_mean, self.running_var, self.training, 0.1, 1e-5, False)
    return torch.linear(torch.relu(h).mean(-1), self.head_weight, self.head_bias)
)JIT");
  const fs::path path = fs::path(::testing::TempDir()) / "conv1d_flops.pt";
  m.save(path.string());
  ScriptedModule net(path);
  data::Batch b;
  b.tensors["signal"] = at::randn({64, 3, 64});
  // A warm-up step, as the trainer counts its second step.
  net.run("forward", {{"", "signal"}}, b).toTensor().sum().backward();
  obs::FlopCounter counter;
  ASSERT_TRUE(counter.start());
  net.run("forward", {{"", "signal"}}, b).toTensor().sum().backward();
  const double per_sample = counter.stop() / 64;
  // By hand, per sample: the convolution 2 x 16 x 64 positions x 3 x 5 = 30,720 forward and as much for its
  // weight's gradient (the data needs none); the Linear 2 x 16 x 4 = 128 forward, twice that backward.
  const double by_hand = 30720.0 + 30720 + 128 + 256;
  EXPECT_NEAR(per_sample, by_hand, 0.02 * by_hand) << "counted " << per_sample;
}

}  // namespace
}  // namespace bellows::models
