// ResNet-18/34: output shapes, torchvision's parameter counts and state_dict names, float64 finite-difference
// gradients, learning a synthetic image task, activation checkpointing (same gradients, running statistics
// updated once), channels_last equivalence, and the registry's checks against the data.
#include "bellows/models/resnet.h"

#include <ATen/ATen.h>
#include <gtest/gtest.h>
#include <torch/csrc/autograd/function.h>
#include <torch/optim/adam.h>
#include <torch/utils.h>
#include <unistd.h>

#include <atomic>
#include <deque>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>

#include "bellows/config/config.h"
#include "bellows/config/schema.h"
#include "bellows/data/image_codec.h"
#include "bellows/data/image_folder.h"
#include "bellows/data/tensor_dataset.h"
#include "bellows/models/registry.h"
#include "bellows/models/tasks.h"
#include "bellows/util/error.h"
#include "model_test_util.h"
#include "test_util.h"

namespace bellows::models {
namespace {

namespace fs = std::filesystem;
using test_support::error_from;
using test_support::TempDir;

// --- helpers ---

// Base width 8 (width 0.125): every code path of ResNet-18 at a size that runs in milliseconds.
ResNetOptions tiny_resnet(std::int64_t classes = 4, const std::string& stem = "small", std::int64_t depth = 18) {
  ResNetOptions o;
  o.depth = depth;
  o.width = 0.125;
  o.num_classes = classes;
  o.stem = stem;
  return o;
}

std::shared_ptr<ResNetImpl> make(const ResNetOptions& o, std::uint64_t seed = 0) {
  torch::manual_seed(seed);
  return std::make_shared<ResNetImpl>(o);
}

std::int64_t parameter_count(torch::nn::Module& m) {
  std::int64_t n = 0;
  for (const auto& p : m.parameters()) n += p.numel();
  return n;
}

// Parameters and buffers by name with their shapes: what a state_dict holds.
std::map<std::string, std::vector<std::int64_t>> state_shapes(torch::nn::Module& m) {
  std::map<std::string, std::vector<std::int64_t>> out;
  for (const auto& p : m.named_parameters()) out[p.key()] = p.value().sizes().vec();
  for (const auto& b : m.named_buffers()) out[b.key()] = b.value().sizes().vec();
  return out;
}

// torchvision's resnet18/34 state_dict (names and shapes), written down from torchvision.models.resnet's
// structure independently of the model under test.
std::map<std::string, std::vector<std::int64_t>> torchvision_state(const std::vector<std::int64_t>& stages) {
  std::map<std::string, std::vector<std::int64_t>> s;
  auto bn = [&s](const std::string& prefix, std::int64_t c) {
    for (const char* n : {"weight", "bias", "running_mean", "running_var"}) s[prefix + "." + n] = {c};
    s[prefix + ".num_batches_tracked"] = {};
  };
  s["conv1.weight"] = {64, 3, 7, 7};
  bn("bn1", 64);
  std::int64_t in = 64;
  for (std::size_t stage = 0; stage < 4; ++stage) {
    const std::int64_t planes = 64 << stage;
    for (std::int64_t i = 0; i < stages[stage]; ++i) {
      const std::string p = "layer" + std::to_string(stage + 1) + "." + std::to_string(i);
      s[p + ".conv1.weight"] = {planes, in, 3, 3};
      bn(p + ".bn1", planes);
      s[p + ".conv2.weight"] = {planes, planes, 3, 3};
      bn(p + ".bn2", planes);
      if (in != planes) {
        s[p + ".downsample.0.weight"] = {planes, in, 1, 1};
        bn(p + ".downsample.1", planes);
      }
      in = planes;
    }
  }
  s["fc.weight"] = {1000, 512};
  s["fc.bias"] = {1000};
  return s;
}

double max_rel_diff(const at::Tensor& a, const at::Tensor& b) {
  const double scale = std::max(a.abs().max().item<double>(), 1e-12);
  return (a.to(at::kDouble) - b.to(at::kDouble)).abs().max().item<double>() / scale;
}

// Whether the autograd graph behind `t` contains a checkpointed block's node.
bool graph_has_checkpoint(const at::Tensor& t) {
  std::deque<torch::autograd::Node*> todo{t.grad_fn().get()};
  std::set<torch::autograd::Node*> seen;
  while (!todo.empty()) {
    torch::autograd::Node* node = todo.front();
    todo.pop_front();
    if (node == nullptr || !seen.insert(node).second) continue;
    if (node->name().find("CheckpointFunction") != std::string::npos) return true;
    for (const auto& edge : node->next_edges()) todo.push_back(edge.function.get());
  }
  return false;
}

// 4 classes of simple patterns, 3x16x16: horizontal stripes, vertical stripes, a checkerboard, diagonal
// stripes; random phase, random colour per channel, gaussian noise 0.3.
std::pair<at::Tensor, at::Tensor> patterns(std::int64_t n, std::uint64_t seed) {
  at::Generator g = at::make_generator<at::CPUGeneratorImpl>(seed);
  const at::Tensor y = at::randint(4, {n}, g, at::kLong);
  const at::Tensor phase = at::randint(4, {n, 1, 1}, g, at::kLong);
  const at::Tensor i = at::arange(16, at::kLong).view({1, 16, 1});
  const at::Tensor j = at::arange(16, at::kLong).view({1, 1, 16});
  const at::Tensor rows = ((i + phase).div(2, "floor") % 2).expand({n, 16, 16});
  const at::Tensor cols = ((j + phase).div(2, "floor") % 2).expand({n, 16, 16});
  const at::Tensor checker = (rows + cols) % 2;
  const at::Tensor diag = ((i + j + phase).div(2, "floor") % 2).expand({n, 16, 16});
  const at::Tensor pick = y.view({n, 1, 1});
  const at::Tensor pattern =
      at::where(pick == 0, rows, at::where(pick == 1, cols, at::where(pick == 2, checker, diag)));
  const at::Tensor colour = at::rand({n, 3, 1, 1}, g) + 0.5;
  const at::Tensor x = (pattern.unsqueeze(1).to(at::kFloat) * 2 - 1) * colour + 0.3 * at::randn({n, 3, 16, 16}, g);
  return {x, y};
}

config::Config resnet_config(const std::string& model_yaml) {
  const ModelEntry& entry = find_model("resnet");
  config::Schema schema;
  schema.add("model.name", config::Type::kString, "model").default_value(YAML::Node("resnet"));
  entry.add_keys(schema);
  config::Config c = config::Config::parse("model:\n  name: resnet\n" + model_yaml, "resnet_test.yaml");
  schema.validate(c);
  return c;
}

// --- shapes, sizes, names ---

TEST(ResNet, OutputShapesForBothDepthsAndStems) {
  for (const std::int64_t depth : {18, 34}) {
    for (const std::string stem : {"imagenet", "small"}) {
      auto model = make(tiny_resnet(10, stem, depth));
      const std::int64_t side = stem == "imagenet" ? 64 : 32;
      const at::Tensor out = model->forward(at::randn({2, 3, side, side}));
      EXPECT_EQ(out.sizes().vec(), (std::vector<std::int64_t>{2, 10})) << depth << " " << stem;
      const auto blocks = model->checkpoint_blocks();
      ASSERT_EQ(blocks.size(), depth == 18 ? 8u : 16u);
      EXPECT_EQ(blocks.front(), "layer1.0");
      EXPECT_EQ(blocks.back(), depth == 18 ? "layer4.1" : "layer4.2");
      const auto shapes = state_shapes(*model);
      EXPECT_EQ(shapes.at("conv1.weight"),
                (stem == "imagenet" ? std::vector<std::int64_t>{8, 3, 7, 7} : std::vector<std::int64_t>{8, 3, 3, 3}));
      EXPECT_EQ(shapes.at("fc.weight"), (std::vector<std::int64_t>{10, 64}));  // 8 x base channels
    }
  }
  // Non-square and odd sizes pool globally to the same head.
  EXPECT_EQ(make(tiny_resnet(3, "imagenet"))->forward(at::randn({1, 3, 45, 77})).sizes().vec(),
            (std::vector<std::int64_t>{1, 3}));
}

TEST(ResNet, ParameterCountsAreTorchvisions) {
  ResNetOptions o;  // width 1, 3 channels, 1000 classes, imagenet stem
  o.depth = 18;
  EXPECT_EQ(parameter_count(*make(o)), 11'689'512);
  o.depth = 34;
  EXPECT_EQ(parameter_count(*make(o)), 21'797'672);
}

TEST(ResNet, StateDictNamesAndShapesAreTorchvisions) {
  for (const std::int64_t depth : {18, 34}) {
    ResNetOptions o;
    o.depth = depth;
    const auto expected =
        torchvision_state(depth == 18 ? std::vector<std::int64_t>{2, 2, 2, 2} : std::vector<std::int64_t>{3, 4, 6, 3});
    EXPECT_EQ(state_shapes(*make(o)), expected) << "resnet" << depth;
    EXPECT_EQ(expected.size(), depth == 18 ? 122u : 218u);
  }
}

TEST(ResNet, BaseChannelsRoundToMultiplesOfEightAtLeastEight) {
  EXPECT_EQ(resnet_base_channels(1.0), 64);
  EXPECT_EQ(resnet_base_channels(0.5), 32);
  EXPECT_EQ(resnet_base_channels(0.3), 16);  // 19.2 -> 16
  EXPECT_EQ(resnet_base_channels(0.125), 8);
  EXPECT_EQ(resnet_base_channels(0.01), 8);
  EXPECT_EQ(resnet_base_channels(1.5), 96);
  EXPECT_EQ(error_from([] { resnet_base_channels(0.0); }).kind(), ErrorKind::kConfig);
  ResNetOptions o = tiny_resnet();
  o.depth = 50;
  const Error e = error_from([&] { make(o); });
  EXPECT_EQ(e.kind(), ErrorKind::kConfig);
  EXPECT_NE(e.message().find("depth 50"), std::string::npos) << e.message();
}

TEST(ResNet, ZeroInitResidualZeroesEachBlocksLastBatchNorm) {
  ResNetOptions o = tiny_resnet();
  o.zero_init_residual = true;
  auto model = make(o);
  int zeroed = 0;
  for (const auto& p : model->named_parameters()) {
    const std::string& name = p.key();
    const bool batch_norm = name.find("bn") != std::string::npos || name.find("downsample.1") != std::string::npos;
    if (!batch_norm || !name.ends_with(".weight")) continue;
    const bool last = name.ends_with(".bn2.weight");
    zeroed += last ? 1 : 0;
    EXPECT_EQ(p.value().sum().item<double>(), last ? 0.0 : static_cast<double>(p.value().numel())) << name;
  }
  EXPECT_EQ(zeroed, 8);
}

// --- inputs ---

TEST(ResNet, RejectsUint8ImagesAndWrongChannelsCastsOtherFloats) {
  auto model = make(tiny_resnet());
  model->eval();
  const Error raw = error_from([&] { model->forward(at::zeros({1, 3, 16, 16}, at::kByte)); });
  EXPECT_EQ(raw.kind(), ErrorKind::kData);
  EXPECT_NE(raw.hint().find("finish_on_device"), std::string::npos) << raw.hint();
  const Error channels = error_from([&] { model->forward(at::zeros({1, 1, 16, 16})); });
  EXPECT_EQ(channels.kind(), ErrorKind::kData);
  EXPECT_NE(channels.message().find("[B, 3, H, W]"), std::string::npos) << channels.message();
  // A float64 batch into the float32 model (and back) computes in the parameters' dtype.
  const at::Tensor x = at::randn({2, 3, 16, 16});
  const at::Tensor a = model->forward(x);
  const at::Tensor b = model->forward(x.to(at::kDouble));
  EXPECT_EQ(b.scalar_type(), at::kFloat);
  EXPECT_TRUE(at::equal(a, b));
}

// --- gradients ---

// Central differences (h = 1e-6) of f = sum(logits * R) in float64 against autograd, for sampled elements of
// eight parameters and of the input; BatchNorm in training mode (batch statistics, so the gradient flows through
// the batch mean and variance too) with the small stem, in evaluation mode with the imagenet stem (max pool).
void expect_finite_differences(const std::string& stem, bool training, std::int64_t side) {
  auto model = make(tiny_resnet(3, stem), 7);
  model->to(at::kDouble);
  model->train(training);
  at::Generator g = at::make_generator<at::CPUGeneratorImpl>(11);
  const at::Tensor x = at::randn({2, 3, side, side}, g, at::kDouble).requires_grad_(true);
  const at::Tensor weights = at::randn({2, 3}, g, at::kDouble);
  auto f = [&] { return (model->forward(x) * weights).sum(); };
  model->zero_grad();
  f().backward();

  const double h = 1e-6;
  auto check = [&](at::Tensor value, const at::Tensor& grad, const std::string& what) {
    const at::Tensor flat = value.view({-1});
    const at::Tensor flat_grad = grad.reshape({-1});
    for (int k = 0; k < 4; ++k) {
      const std::int64_t i = at::randint(flat.numel(), {1}, g, at::kLong).item<std::int64_t>();
      torch::NoGradGuard no_grad;
      const double saved = flat[i].item<double>();
      flat[i] = saved + h;
      const double up = f().item<double>();
      flat[i] = saved - h;
      const double down = f().item<double>();
      flat[i] = saved;
      const double numeric = (up - down) / (2 * h);
      const double analytic = flat_grad[i].item<double>();
      EXPECT_NEAR(analytic, numeric, 1e-7 + 1e-5 * std::abs(numeric)) << stem << " " << what << "[" << i << "]";
    }
  };
  const auto params = model->named_parameters();
  for (const char* name : {"conv1.weight", "bn1.weight", "layer1.0.conv2.weight", "layer2.0.downsample.0.weight",
                           "layer2.0.downsample.1.bias", "layer3.1.bn2.weight", "layer4.1.conv2.weight", "fc.weight"}) {
    const at::Tensor& p = params[name];
    check(p.detach(), p.grad(), name);
  }
  check(x.detach(), x.grad(), "x");
}

TEST(ResNet, GradientsMatchFiniteDifferencesTrainModeSmallStem) {
  expect_finite_differences("small", true, 16);
}
TEST(ResNet, GradientsMatchFiniteDifferencesEvalModeImagenetStem) {
  expect_finite_differences("imagenet", false, 32);
}

// --- learning ---

// A tiny ResNet-18 (base 8, small stem) with Adam (lr 3e-3), batch 32 of the 4-pattern task: after 25 steps the
// loss on 256 held-out images in evaluation mode is below 0.1 and their accuracy above 95% (chance: 1.39, 25%).
// (Measured with this seed: 0.0027 after 20 steps, 0.0010 after 30.)
TEST(ResNet, LearnsFourSyntheticPatternsBelow0_1In25Steps) {
  auto model = make(tiny_resnet(4), 1);
  auto task = make_classification_task(
      [](torch::nn::Module& m, const at::Tensor& x) { return static_cast<ResNetImpl&>(m).forward(x); });
  torch::optim::Adam adam(model->parameters(), torch::optim::AdamOptions(3e-3));
  auto [x, y] = patterns(32 * 25, 5);
  for (std::int64_t step = 0; step < 25; ++step) {
    data::Batch b;
    b.tensors = {{"x", x.narrow(0, step * 32, 32)}, {"y", y.narrow(0, step * 32, 32)}};
    b.size = 32;
    adam.zero_grad();
    task->step(*model, b).loss.backward();
    adam.step();
  }
  auto [vx, vy] = patterns(256, 99);
  model->eval();
  torch::NoGradGuard no_grad;
  data::Batch val;
  val.tensors = {{"x", vx}, {"y", vy}};
  val.size = 256;
  const StepOutput out = task->eval_step(*model, val);
  EXPECT_LT(out.loss.item<double>(), 0.1);
  EXPECT_GT(out.metrics.at(0).second.item<double>(), 0.95);
}

// --- activation checkpointing ---

// One training step (forward, backward) of the same model with and without every block checkpointed: bitwise the
// same loss and gradients (the recomputation runs the same kernels on the same inputs), and BatchNorm's running
// statistics moved once (num_batches_tracked 1), bitwise as in the plain step.
TEST(ResNet, CheckpointingGivesIdenticalGradientsAndRunningStats) {
  auto plain = make(tiny_resnet(4, "imagenet"), 3);
  auto checkpointed = make(tiny_resnet(4, "imagenet"), 3);
  EXPECT_EQ(apply_checkpointing(*checkpointed, {"layer*"}).size(), 8u);
  EXPECT_EQ(apply_checkpointing(*plain, {"layer2.*"}), (std::vector<std::string>{"layer2.0", "layer2.1"}));
  apply_checkpointing(*plain, {});
  const at::Tensor x = at::randn({4, 3, 32, 32});
  const at::Tensor weights = at::randn({4, 4});

  const at::Tensor loss_plain = (plain->forward(x) * weights).sum();
  const at::Tensor loss_ckpt = (checkpointed->forward(x) * weights).sum();
  EXPECT_FALSE(graph_has_checkpoint(loss_plain));
  EXPECT_TRUE(graph_has_checkpoint(loss_ckpt));
  loss_plain.backward();
  loss_ckpt.backward();
  EXPECT_TRUE(at::equal(loss_plain, loss_ckpt));

  const auto p = plain->named_parameters();
  const auto c = checkpointed->named_parameters();
  for (const auto& item : p) {
    ASSERT_TRUE(item.value().grad().defined()) << item.key();
    EXPECT_TRUE(at::equal(item.value().grad(), c[item.key()].grad())) << item.key();
  }
  const auto pb = plain->named_buffers();
  const auto cb = checkpointed->named_buffers();
  for (const auto& item : pb) {
    if (item.key().ends_with("num_batches_tracked")) {
      EXPECT_EQ(item.value().item<std::int64_t>(), 1) << item.key();
      EXPECT_EQ(cb[item.key()].item<std::int64_t>(), 1) << item.key();
    } else {
      EXPECT_TRUE(at::equal(item.value(), cb[item.key()])) << item.key();
    }
  }
  // The checkpointed blocks' running statistics did move (once): not still at their initial 0 / 1.
  EXPECT_GT(cb["layer3.1.bn2.running_mean"].abs().sum().item<double>(), 0.0);
}

// --- memory format ---

// The trainer's channels_last conversion (4-D parameters and inputs to NHWC): the same logits and gradients
// within fp32 tolerance, in training and evaluation mode.
TEST(ResNet, ChannelsLastGivesTheSameResult) {
  for (const bool training : {true, false}) {
    auto nchw = make(tiny_resnet(5, "imagenet"), 4);
    auto nhwc = make(tiny_resnet(5, "imagenet"), 4);
    {
      torch::NoGradGuard no_grad;
      for (auto& p : nhwc->parameters()) {
        if (p.dim() == 4) p.set_data(p.contiguous(at::MemoryFormat::ChannelsLast));
      }
    }
    nchw->train(training);
    nhwc->train(training);
    const at::Tensor x = at::randn({4, 3, 48, 48});
    const at::Tensor a = nchw->forward(x);
    const at::Tensor b = nhwc->forward(x.contiguous(at::MemoryFormat::ChannelsLast));
    EXPECT_LT(max_rel_diff(a, b), 1e-5) << "training " << training;
    a.square().sum().backward();
    b.square().sum().backward();
    const auto pa = nchw->named_parameters();
    const auto pb = nhwc->named_parameters();
    for (const auto& item : pa) {
      EXPECT_LT(max_rel_diff(item.value().grad(), pb[item.key()].grad().contiguous()), 1e-4) << item.key();
    }
    EXPECT_TRUE(nhwc->named_parameters()["layer1.0.conv1.weight"].is_contiguous(at::MemoryFormat::ChannelsLast));
  }
}

// --- the registry and the data ---

TEST(ResNetRegistry, BuildsFromConfigAndTakesClassesFromTheData) {
  const config::Config c = resnet_config("  width: 0.125\n  stem: small\n  in_channels: 1\n");
  auto tensors = std::map<std::string, at::Tensor>{{"x", at::randn({6, 1, 16, 16})},
                                                   {"y", at::tensor({0, 1, 4, 2, 0, 3}, at::kLong)}};
  auto dataset = std::make_shared<data::TensorDataset>(tensors);
  const BuiltModel built = find_model("resnet").build(c, test_support::context_of(dataset));
  auto& model = static_cast<ResNetImpl&>(*built.module);
  EXPECT_EQ(model.options().num_classes, 5);  // labels 0..4
  data::Batch b;
  b.tensors = tensors;
  b.size = 6;
  const StepOutput out = built.task->step(model, b);
  EXPECT_EQ(out.loss.dim(), 0);
  EXPECT_TRUE(std::isfinite(out.loss.item<double>()));

  const Error no_data = error_from([&] { find_model("resnet").build(c, ModelContext{}); });
  EXPECT_EQ(no_data.kind(), ErrorKind::kConfig);
}

TEST(ResNetRegistry, ChannelAndClassMismatchesAreConfigErrors) {
  auto dataset = std::make_shared<data::TensorDataset>(
      std::map<std::string, at::Tensor>{{"x", at::randn({4, 1, 16, 16})}, {"y", at::tensor({0, 1, 4, 2}, at::kLong)}});
  const Error channels =
      error_from([&] { find_model("resnet").build(resnet_config("  out_features: 5\n"), test_support::context_of(dataset)); });
  EXPECT_EQ(channels.kind(), ErrorKind::kConfig);
  EXPECT_NE(channels.message().find("model.in_channels is 3"), std::string::npos) << channels.message();
  EXPECT_NE(channels.hint().find("model.in_channels: 1"), std::string::npos) << channels.hint();
  const Error classes = error_from([&] {
    find_model("resnet").build(resnet_config("  in_channels: 1\n  out_features: 3\n"), test_support::context_of(dataset));
  });
  EXPECT_EQ(classes.kind(), ErrorKind::kConfig);
  EXPECT_NE(classes.message().find("model.out_features is 3"), std::string::npos) << classes.message();
  EXPECT_NE(classes.message().find("labels up to 4"), std::string::npos) << classes.message();
  auto flat = std::make_shared<data::TensorDataset>(std::map<std::string, at::Tensor>{{"x", at::randn({4, 8})}});
  const Error shape =
      error_from([&] { find_model("resnet").build(resnet_config("  out_features: 2\n"), test_support::context_of(flat)); });
  EXPECT_NE(shape.message().find("images [C, H, W]"), std::string::npos) << shape.message();
}

// model.num_classes, the key's old name (the other classifiers' is model.out_features), still sets the class count,
// and the plan says it is deprecated; both keys with different counts are an error naming both.
TEST(ResNetRegistry, NumClassesIsTheDeprecatedNameOfOutFeatures) {
  auto dataset = std::make_shared<data::TensorDataset>(
      std::map<std::string, at::Tensor>{{"x", at::randn({4, 1, 16, 16})}, {"y", at::tensor({0, 1, 4, 2}, at::kLong)}});
  const BuiltModel built = find_model("resnet").build(resnet_config("  width: 0.125\n  in_channels: 1\n  num_classes: 6\n"),
                                                      test_support::context_of(dataset));
  EXPECT_EQ(static_cast<ResNetImpl&>(*built.module).options().num_classes, 6);
  ASSERT_EQ(built.plan_rows.size(), 1u);
  EXPECT_EQ(built.plan_rows[0].key, "model.num_classes");
  EXPECT_EQ(built.plan_rows[0].value, "6");
  EXPECT_NE(built.plan_rows[0].reason.find("deprecated (resnet_test.yaml:"), std::string::npos) << built.plan_rows[0].reason;
  EXPECT_NE(built.plan_rows[0].reason.find("the old name of model.out_features"), std::string::npos);
  const Error few = error_from([&] {
    find_model("resnet").build(resnet_config("  in_channels: 1\n  num_classes: 3\n"), test_support::context_of(dataset));
  });
  EXPECT_NE(few.message().find("model.num_classes is 3 (resnet_test.yaml:"), std::string::npos) << few.message();
  const Error both = error_from([&] {
    find_model("resnet").build(resnet_config("  in_channels: 1\n  num_classes: 6\n  out_features: 5\n"), test_support::context_of(dataset));
  });
  EXPECT_EQ(both.kind(), ErrorKind::kConfig);
  EXPECT_NE(both.message().find("model.num_classes is 6"), std::string::npos) << both.message();
  EXPECT_NE(both.message().find("model.out_features is 5"), std::string::npos) << both.message();
  EXPECT_EQ(find_model("resnet").build(resnet_config("  width: 0.125\n  in_channels: 1\n  out_features: 6\n"),
                                       test_support::context_of(dataset)).plan_rows.size(), 0u);
}

// An image folder of 3 classes: its class list decides the class count; its uint8 batches reach the model only
// after finish_on_device made them normalised float32.
TEST(ResNetRegistry, ImageFolderClassesAndNormalisedBatches) {
  TempDir dir("resnet_test");
  for (const std::string cls : {"circle", "square", "stripe"}) {
    for (int i = 0; i < 2; ++i) {
      const at::Tensor image = at::randint(256, {12, 12, 3}, at::kLong).to(at::kByte);
      const auto bytes = data::encode_png(image);
      fs::create_directories(dir.path() / cls);
      std::ofstream(dir.path() / cls / (std::to_string(i) + ".png"), std::ios::binary)
          .write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
    }
  }
  data::ImageFolderOptions io;
  io.root = dir.path();
  auto images = data::make_image_folder_dataset(io);

  const Error wrong =
      error_from([&] { find_model("resnet").build(resnet_config("  out_features: 10\n"), test_support::context_of(images)); });
  EXPECT_EQ(wrong.kind(), ErrorKind::kConfig);
  EXPECT_NE(wrong.message().find("has 3 classes"), std::string::npos) << wrong.message();

  const BuiltModel built =
      find_model("resnet").build(resnet_config("  width: 0.125\n  stem: small\n"), test_support::context_of(images));
  auto& model = static_cast<ResNetImpl&>(*built.module);
  EXPECT_EQ(model.options().num_classes, 3);
  data::FetchContext context;
  const std::vector<std::int64_t> indices = {0, 3, 5};
  data::Batch batch = images->get_batch(indices, context);
  EXPECT_EQ(batch.at("x").scalar_type(), at::kByte);
  EXPECT_EQ(error_from([&] { built.task->step(model, batch); }).kind(), ErrorKind::kData);
  images->finish_on_device(batch);
  EXPECT_EQ(batch.at("x").scalar_type(), at::kFloat);
  const StepOutput out = built.task->step(model, batch);
  EXPECT_TRUE(std::isfinite(out.loss.item<double>()));
}

}  // namespace
}  // namespace bellows::models
