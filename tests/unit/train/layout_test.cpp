// W4's channels_last step on the CPU (issue 43): every 4-D tensor of a ResNet step in the layout the convolution
// wants, and no layout copy beyond what PyTorch's loop makes. The GPU census (docs/gpu.md, H200 call 5) found
// cuDNN layout transposes and copies in bellows' W4 step that PyTorch's did not launch; on the CPU the same kind
// of mistake shows as a copy of a 4-D tensor in a profiler trace (oneDNN converts what is not NHWC itself, inside
// ATen's convolution ops, as in PyTorch).
#include <ATen/ATen.h>
#include <gtest/gtest.h>
#include <torch/utils.h>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "bellows/data/tensor_source.h"
#include "bellows/models/resnet.h"
#include "bellows/models/tasks.h"
#include "bellows/train/trainer.h"

namespace bellows::train {
namespace layout_test {

namespace fs = std::filesystem;

std::shared_ptr<models::ResNetImpl> small_resnet() {
  models::ResNetOptions ro;
  ro.width = 0.125;  // 8 channels in the first stage
  ro.num_classes = 10;
  return std::make_shared<models::ResNetImpl>(ro);
}

bool nhwc(const at::Tensor& t) { return t.dim() != 4 || t.is_contiguous(at::MemoryFormat::ChannelsLast); }

// The model and the input in channels_last: every weight and every weight's gradient is NHWC (the activations are
// checked by the trace below: a conversion of one would be a copy there).
TEST(ChannelsLast, WeightsAndTheirGradientsStayNhwc) {
  torch::manual_seed(0);
  auto model = small_resnet();
  {
    torch::NoGradGuard no_grad;
    for (auto& p : model->parameters()) {
      if (p.dim() == 4) p.set_data(p.contiguous(at::MemoryFormat::ChannelsLast));  // what the trainer does (trainer.cpp)
    }
  }
  const at::Tensor x = at::randn({4, 3, 24, 24}).contiguous(at::MemoryFormat::ChannelsLast);
  const at::Tensor out = model->forward(x);
  out.sum().backward();
  for (const auto& item : model->named_parameters()) {
    const std::string& name = item.key();
    const at::Tensor& p = item.value();
    EXPECT_TRUE(nhwc(p)) << name;
    ASSERT_TRUE(p.grad().defined()) << name;
    // The gradient in the weight's layout, compared as ATen's fused optimizers compare them (dimensions of size 1
    // aside): the optimizer then walks both as one array, with no copy.
    if (p.dim() == 4) {
      for (std::int64_t d = 0; d < 4; ++d) {
        if (p.size(d) != 1) EXPECT_EQ(p.grad().stride(d), p.stride(d)) << name << " dim " << d;
      }
    }
  }
}

// Copies of 4-D tensors in a traced training step (2 micro-batches of 4 images, AdamW, clipping, out-of-memory
// recovery on), outside ATen's own convolution and optimizer kernels, each counted once at its outermost op.
struct Copy {
  std::string chain;  // the enclosing ops, outermost first
  std::string dims;
};

std::vector<Copy> layout_copies(const fs::path& trace) {
  nlohmann::json doc = nlohmann::json::parse(std::ifstream(trace));
  const nlohmann::json& events = doc.is_object() ? doc["traceEvents"] : doc;
  std::map<std::int64_t, std::vector<nlohmann::json>> by_thread;
  for (const auto& e : events) {
    if (e.value("ph", "") == "X" && (e.value("cat", "") == "cpu_op" || e.value("cat", "") == "user_annotation")) {
      by_thread[e.value("tid", std::int64_t{0})].push_back(e);
    }
  }
  // The ops that copy (to() and contiguous() of a tensor already so return it: they copy only through these).
  static const std::set<std::string> kCopies = {"aten::copy_", "aten::clone", "aten::_to_copy"};
  // Inside these, a conversion is ATen's own (the same calls in PyTorch's loop): oneDNN's weight and gradient
  // handling, the CPU fused optimizer's contiguous() of NHWC gradients.
  static const std::set<std::string> kAtenInternal = {"aten::convolution_backward", "aten::mkldnn_convolution", "aten::_fused_adamw_",
                                                      "aten::_fused_adam_", "aten::convolution"};
  std::vector<Copy> found;
  for (auto& [tid, list] : by_thread) {
    std::sort(list.begin(), list.end(), [](const auto& a, const auto& b) {
      return a["ts"].template get<double>() < b["ts"].template get<double>() ||
             (a["ts"].template get<double>() == b["ts"].template get<double>() && a["dur"].template get<double>() > b["dur"].template get<double>());
    });
    std::vector<const nlohmann::json*> stack;
    for (const auto& e : list) {
      const double ts = e["ts"].get<double>();
      while (!stack.empty() && (*stack.back())["ts"].get<double>() + (*stack.back())["dur"].get<double>() <= ts) stack.pop_back();
      const std::string name = e.value("name", "");
      const bool inside_copy = std::any_of(stack.begin(), stack.end(), [](const auto* s) { return kCopies.contains(s->value("name", "")); });
      const bool inside_aten = std::any_of(stack.begin(), stack.end(), [](const auto* s) { return kAtenInternal.contains(s->value("name", "")); });
      const auto& args = e.contains("args") ? e["args"] : nlohmann::json::object();
      const bool four_d = args.contains("Input Dims") && !args["Input Dims"].empty() && args["Input Dims"][0].size() == 4;
      if (kCopies.contains(name) && !inside_copy && !inside_aten && four_d) {
        std::string chain;
        for (const auto* s : stack) chain += s->value("name", "") + " > ";
        found.push_back({chain + name, args["Input Dims"][0].dump()});
      }
      stack.push_back(&e);
    }
  }
  return found;
}

TEST(ChannelsLast, ATrainingStepCopiesOnlyItsInputIntoNhwc) {
  torch::manual_seed(0);
  auto model = small_resnet();
  auto task = models::make_classification_task(
      [](torch::nn::Module& m, const at::Tensor& x) { return static_cast<models::ResNetImpl&>(m).forward(x); });
  const std::int64_t n = 32;
  data::TensorSourceOptions so;
  so.batch_size = 4;
  so.shuffle = false;
  data::TensorSource source({{"x", at::randn({n, 3, 24, 24})}, {"y", at::arange(n, at::kLong) % 10}}, so);
  TrainerOptions o;
  o.channels_last = true;
  o.accumulation_steps = 2;
  o.clip_max_norm = 1.0;
  o.optimizer.type = "adamw";
  o.optimizer.implementation = "fused";
  o.epochs = 1;
  o.count_flops = false;
  o.log_every_n_steps = 100;
  const fs::path dir = fs::path(::testing::TempDir()) / "bellows_layout_trace";
  fs::create_directories(dir);
  o.profile.enabled = true;
  o.profile.start_step = 2;  // the third optimizer step: state and caches exist
  o.profile.steps = 1;
  o.profile.path = dir / "trace.json";
  Trainer trainer(model, task, o);
  trainer.fit(source);
  ASSERT_TRUE(fs::exists(o.profile.path));
  const std::vector<Copy> copies = layout_copies(o.profile.path);
  std::string listed;
  for (const auto& c : copies) listed += c.chain + " " + c.dims + "\n";
  // One per micro-batch: the input batch converted to NHWC (eager_step.cpp to_device), which PyTorch's loop makes too
  // (bench/peers/peer.py: x.contiguous(memory_format=torch.channels_last) per batch). Nothing else: no weight, gradient
  // or activation changes layout outside ATen's kernels.
  ASSERT_EQ(copies.size(), 2u) << listed;
  for (const auto& c : copies) EXPECT_EQ(c.dims, "[4,3,24,24]") << listed;
}

}  // namespace layout_test
}  // namespace bellows::train
