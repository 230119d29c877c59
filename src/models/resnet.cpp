// ResNet-18/34; see resnet.h. Layout and initialisation follow torchvision.models.resnet (kaiming-normal
// fan_out convolutions, BatchNorm weight 1 and bias 0, PyTorch's default Linear), so a run started from the
// same safetensors weights computes the same thing as the PyTorch peer of workload W4.
#include "bellows/models/resnet.h"

#include <ATen/ATen.h>
#include <ATen/autocast_mode.h>
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <torch/nn/init.h>

#include <cmath>
#include <optional>
#include <utility>

#include "bellows/config/binding.h"  // defines: Binding
#include "bellows/models/class_count.h"
#include "bellows/models/flops.h"
#include "bellows/models/registry.h"
#include "bellows/models/tasks.h"
#include "bellows/util/check.h"

namespace bellows::models {
namespace {

torch::nn::Conv2d conv(std::int64_t in, std::int64_t out, std::int64_t kernel, std::int64_t stride) {
  return torch::nn::Conv2d(torch::nn::Conv2dOptions(in, out, kernel).stride(stride).padding(kernel / 2).bias(false));
}

std::vector<std::int64_t> blocks_per_stage(std::int64_t depth) {
  if (depth == 18) return {2, 2, 2, 2};
  if (depth == 34) return {3, 4, 6, 3};
  BELLOWS_FAIL(ErrorKind::kConfig, fmt::format("ResNet depth {} is not supported", depth),
               "set model.depth to 18 or 34 (BasicBlock ResNets)");
}

}  // namespace

std::int64_t resnet_base_channels(double width) {
  BELLOWS_CHECK_CONFIG(width > 0 && std::isfinite(width), fmt::format("ResNet width {} is not positive", width),
                       "set model.width to a positive multiplier of 64 channels (1.0: torchvision's ResNet)");
  return std::max<std::int64_t>(8, 8 * std::llround(64.0 * width / 8.0));
}

double resnet_forward_flops(const ResNetOptions& o, std::int64_t height, std::int64_t width) {
  // A convolution with padding kernel / 2: out = (in + 2 (k / 2) - k) / stride + 1.
  const auto out_size = [](std::int64_t in, std::int64_t kernel, std::int64_t stride) { return (in + 2 * (kernel / 2) - kernel) / stride + 1; };
  const bool imagenet = o.stem == "imagenet";
  const std::int64_t base = resnet_base_channels(o.width), k = imagenet ? 7 : 3, s = imagenet ? 2 : 1;
  std::int64_t h = out_size(height, k, s), w = out_size(width, k, s);
  BELLOWS_CHECK_CONFIG(h >= 1 && w >= 1, fmt::format("ResNet images of {}x{} are too small for the {} stem", height, width, o.stem),
                       "use larger images or model.stem: small");
  // --- stem ---
  double flops = conv2d_flops(1, o.in_channels, base, k, k, h, w) + norm_flops(static_cast<double>(base * h * w));
  if (imagenet) {  // 3x3 stride-2 max pool, padding 1
    h = (h + 2 - 3) / 2 + 1;
    w = (w + 2 - 3) / 2 + 1;
  }
  // --- stages of BasicBlocks ---
  std::int64_t in_planes = base;
  const std::vector<std::int64_t> stages = blocks_per_stage(o.depth);
  for (std::size_t stage = 0; stage < stages.size(); ++stage) {
    const std::int64_t planes = base << stage;
    for (std::int64_t i = 0; i < stages[stage]; ++i) {
      const std::int64_t stride = (stage > 0 && i == 0) ? 2 : 1;
      const std::int64_t ho = out_size(h, 3, stride), wo = out_size(w, 3, stride);
      const double values = static_cast<double>(planes * ho * wo);
      flops += conv2d_flops(1, in_planes, planes, 3, 3, ho, wo) + norm_flops(values);  // conv1, bn1
      flops += conv2d_flops(1, planes, planes, 3, 3, ho, wo) + norm_flops(values);     // conv2, bn2
      if (stride != 1 || in_planes != planes) flops += conv2d_flops(1, in_planes, planes, 1, 1, ho, wo) + norm_flops(values);  // downsample
      h = ho;
      w = wo;
      in_planes = planes;
    }
  }
  // --- head ---
  return flops + linear_flops(1, in_planes, o.num_classes);
}

at::Tensor batch_norm_once(torch::nn::BatchNorm2d& bn, const at::Tensor& x) {
  if (!bn->is_training() || !recomputing()) return bn->forward(x);
  // The forward pass already moved the running statistics; normalise with the batch's statistics as it did.
  return at::batch_norm(x, bn->weight, bn->bias, /*running_mean=*/{}, /*running_var=*/{}, /*training=*/true,
                        /*momentum=*/0.0, bn->options.eps(), at::globalContext().userEnabledCuDNN());
}

// --- the block ---

BasicBlockImpl::BasicBlockImpl(std::int64_t in_planes, std::int64_t planes, std::int64_t stride) {
  conv1 = register_module("conv1", conv(in_planes, planes, 3, stride));
  bn1 = register_module("bn1", torch::nn::BatchNorm2d(planes));
  conv2 = register_module("conv2", conv(planes, planes, 3, 1));
  bn2 = register_module("bn2", torch::nn::BatchNorm2d(planes));
  if (stride != 1 || in_planes != planes) {
    down_conv_ = conv(in_planes, planes, 1, stride);
    down_bn_ = torch::nn::BatchNorm2d(planes);
    downsample = register_module("downsample", torch::nn::Sequential(down_conv_, down_bn_));
  }
}

at::Tensor BasicBlockImpl::forward(const at::Tensor& x) {
  at::Tensor out = batch_norm_once(bn1, conv1->forward(x)).relu_();
  out = batch_norm_once(bn2, conv2->forward(out));
  const at::Tensor identity = downsample ? batch_norm_once(down_bn_, down_conv_->forward(x)) : x;
  return out.add_(identity).relu_();
}

// --- the network ---

ResNetImpl::ResNetImpl(const ResNetOptions& options) : options_(options) {
  const std::vector<std::int64_t> stages = blocks_per_stage(options.depth);
  const std::int64_t base = resnet_base_channels(options.width);
  BELLOWS_CHECK_CONFIG(options.in_channels >= 1,
                       fmt::format("ResNet in_channels {} is not positive", options.in_channels),
                       "set model.in_channels to the images' channel count (3 for RGB)");
  BELLOWS_CHECK_CONFIG(options.num_classes >= 1,
                       fmt::format("ResNet num_classes {} is not positive", options.num_classes),
                       "set model.num_classes to the number of classes");
  BELLOWS_CHECK_CONFIG(
      options.stem == "imagenet" || options.stem == "small", fmt::format("unknown ResNet stem '{}'", options.stem),
      "use stem imagenet (7x7 stride-2 conv + max pool) or small (3x3 stride-1 conv, for small images)");

  const bool imagenet = options.stem == "imagenet";
  conv1_ = register_module("conv1", conv(options.in_channels, base, imagenet ? 7 : 3, imagenet ? 2 : 1));
  bn1_ = register_module("bn1", torch::nn::BatchNorm2d(base));
  std::int64_t in_planes = base;
  for (std::size_t s = 0; s < stages.size(); ++s) {
    const std::int64_t planes = base << s;
    torch::nn::ModuleList layer;
    for (std::int64_t i = 0; i < stages[s]; ++i) {
      const std::int64_t stride = (s > 0 && i == 0) ? 2 : 1;
      BasicBlock block(in_planes, planes, stride);
      layer->push_back(block);
      blocks_.emplace_back(fmt::format("layer{}.{}", s + 1, i), block);
      in_planes = planes;
    }
    register_module(fmt::format("layer{}", s + 1), layer);
  }
  fc_ = register_module("fc", torch::nn::Linear(in_planes, options.num_classes));

  // torchvision's initialisation; the Linear keeps PyTorch's default.
  torch::NoGradGuard no_grad;
  for (auto& module : modules(/*include_self=*/false)) {
    if (auto* c = module->as<torch::nn::Conv2d>()) {
      torch::nn::init::kaiming_normal_(c->weight, 0.0, torch::kFanOut, torch::kReLU);
    } else if (auto* bn = module->as<torch::nn::BatchNorm2d>()) {
      bn->weight.fill_(1.0);
      bn->bias.zero_();
    }
  }
  if (options.zero_init_residual) {
    for (auto& [name, block] : blocks_) block->bn2->weight.zero_();
  }
}

at::Tensor ResNetImpl::forward(const at::Tensor& x) {
  BELLOWS_CHECK_DATA(
      x.dim() == 4 && x.size(1) == options_.in_channels,
      fmt::format("ResNet input x has shape {}, expected [B, {}, H, W]", x.sizes(), options_.in_channels),
      "give image batches [B, C, H, W] with model.in_channels channels");
  BELLOWS_CHECK_DATA(x.is_floating_point(),
                     fmt::format("ResNet input x is {} [B, C, H, W]: images must arrive normalised as floats",
                                 c10::toString(x.scalar_type())),
                     "the image folder source normalises its uint8 batches in finish_on_device (the Loader calls it); "
                     "outside the Loader call dataset.finish_on_device(batch) or convert x yourself");
  at::Tensor h = x;
  // Under autocast the convolution casts its input itself; outside it, the input meets the weights' dtype.
  const at::ScalarType dtype = conv1_->weight.scalar_type();
  if (h.scalar_type() != dtype && !at::autocast::is_autocast_enabled(h.device().type())) h = h.to(dtype);

  // --- stem ---
  h = bn1_->forward(conv1_->forward(h)).relu_();
  if (options_.stem == "imagenet") h = at::max_pool2d(h, {3, 3}, {2, 2}, {1, 1});

  // --- stages: each block directly, or checkpointed when selected ---
  for (auto& [name, block] : blocks_) {
    BasicBlockImpl& b = *block;
    // The function is kept by the checkpoint until backward: it holds the block by reference, nothing else.
    const BlockFunction fn = [&b](const std::vector<at::Tensor>& in) {
      return std::vector<at::Tensor>{b.forward(in[0])};
    };
    h = run_block(name, b, fn, {h})[0];
  }

  // --- head ---
  h = at::adaptive_avg_pool2d(h, {1, 1}).flatten(1);
  return fc_->forward(h);
}

std::vector<std::string> ResNetImpl::checkpoint_blocks() const {
  std::vector<std::string> names;
  names.reserve(blocks_.size());
  for (const auto& [name, block] : blocks_) names.push_back(name);
  return names;
}

// --- registration ---

namespace {

// The model's input channels and class count against the training data: clear errors before the first step
// instead of a shape mismatch inside a convolution or an out-of-range target inside the loss. A class count of 0
// takes the data's. `key` is the config key that gave the count (models/class_count.h).
void check_against_data(ResNetOptions& o, const config::Config& c, const std::string& key, const data::Dataset& train,
                        const data::DataFacts& facts) {
  if (train.size() > 0) {
    const data::Batch one = data::first_sample(train);
    const at::Tensor& x = one.at("x");
    BELLOWS_CHECK_CONFIG(x.dim() == 4,
                         fmt::format("model resnet needs images [C, H, W], but the samples of {} are x {}",
                                     train.name(), x.sizes().slice(1)),
                         "use an image_folder source (data.source: image_folder), or data whose x is [C, H, W]");
    BELLOWS_CHECK_CONFIG(x.size(1) == o.in_channels,
                         fmt::format("model.in_channels is {} ({}) but the images of {} have {} channels",
                                     o.in_channels, c.origin("model.in_channels").str(), train.name(), x.size(1)),
                         fmt::format("set model.in_channels: {} (or change data.images.channels)", x.size(1)));
  }
  std::optional<std::int64_t> exact;  // the source's class list (an image folder's)
  std::int64_t at_least = 0;          // 1 + the largest label, from class_labels()
  std::string origin = train.name();
  if (facts.classes) {
    exact = static_cast<std::int64_t>(facts.classes->size());
  } else if (const at::Tensor labels = train.class_labels(); labels.defined() && labels.numel() > 0) {
    at_least = labels.max().item<std::int64_t>() + 1;
  }
  if (o.num_classes == 0) {
    BELLOWS_CHECK_CONFIG(exact || at_least > 0,
                         fmt::format("{} is 0 (from the data), but {} has no class labels", key, origin),
                         "set model.out_features to the number of classes");
    o.num_classes = exact ? *exact : at_least;
    return;
  }
  BELLOWS_CHECK_CONFIG(!exact || *exact == o.num_classes,
                       fmt::format("{} is {} ({}) but {} has {} classes", key, o.num_classes, c.origin(key).str(), origin, exact.value_or(0)),
                       fmt::format("set model.out_features: {} (or 0 to take the data's count)", exact.value_or(0)));
  BELLOWS_CHECK_CONFIG(at_least <= o.num_classes,
                       fmt::format("{} is {} ({}) but {} has labels up to {}", key, o.num_classes, c.origin(key).str(), origin, at_least - 1),
                       fmt::format("set model.out_features to at least {} (or 0 to take the data's count)", at_least));
}

// The model.* keys of ResNetOptions, bound once (config/binding.h).
const config::Binding<ResNetOptions>& resnet_binding() {
  using O = ResNetOptions;
  return config::bound<O>("model.", [](config::Binding<O>& b) {
    b.key("depth", &O::depth, "18 ([2,2,2,2] BasicBlocks) or 34 ([3,4,6,3])").min(18).max(34);
    b.key("width", &O::width, "channel multiplier: 64 x width rounded to a multiple of 8 (>= 8) in the first stage").min(1e-3);
    b.key("in_channels", &O::in_channels, "image channels").min(1);
    // The class count (model.out_features, models/class_count.h) is read apart from the binding.
    b.key("stem", &O::stem, "imagenet: 7x7 stride-2 conv + max pool; small: 3x3 stride-1 conv, no pool (small images)")
        .choices({"imagenet", "small"});
    b.key("zero_init_residual", &O::zero_init_residual, "start each block's last BatchNorm at weight 0");
  });
}

// The binding's keys and the class count (0: the data's; the struct's 1000 is ImageNet's, for C++ callers), with
// the key that gave the count (for messages).
std::pair<ResNetOptions, std::string> resnet_options(const config::Config& c) {
  ResNetOptions o = resnet_binding().read(c);
  ClassCount count = read_class_count(c);
  o.num_classes = count.value;
  return {o, std::move(count.key)};
}

ModelEntry resnet_entry() {
  ModelEntry e;
  e.name = "resnet";
  e.convolutional = true;
  e.help = "ResNet-18/34 image classifier, torchvision-compatible names (W4); task: classification";
  // A quarter of the channels and the small stem on 16 x 16 images: seconds on two cores; the classes are the data's.
  e.demo.yaml = R"(data:
  source: synthetic
  kind: images
  samples: 1024
  channels: 3
  side: 16
  classes: 10
  batch_size: 64
  val_fraction: 0.1
model:
  name: resnet
  width: 0.25
  stem: small
)";
  e.demo.data = "synthetic images (3 x 16 x 16, 10 classes of smooth templates under noise, 1024 samples)";
  e.add_keys = [](config::Schema& s) {
    resnet_binding().declare(s);
    declare_class_count(s, "the training data's class count");
  };
  e.io = class_count_io;
  e.forward_flops = [](const config::Config& c, const ModelContext& context) -> std::optional<double> {
    if (!context.train || context.train->size() == 0) return std::nullopt;  // the image size comes from the data
    const at::Tensor x = data::first_sample(*context.train).at("x");
    if (x.dim() != 4) return std::nullopt;
    auto [o, key] = resnet_options(c);
    o.in_channels = x.size(1);
    if (o.num_classes == 0) check_against_data(o, c, key, *context.train, context.facts);
    return resnet_forward_flops(o, x.size(2), x.size(3));
  };
  e.build = [](const config::Config& c, const ModelContext& context) {
    auto [o, key] = resnet_options(c);
    if (context.train) {
      check_against_data(o, c, key, *context.train, context.facts);
    } else {
      BELLOWS_CHECK_CONFIG(o.num_classes > 0, fmt::format("{} is 0 (from the data), but the model is built without data", key),
                           "set model.out_features to the number of classes");
    }
    auto module = std::make_shared<ResNetImpl>(o);
    Forward forward = [](torch::nn::Module& m, const at::Tensor& x) { return static_cast<ResNetImpl&>(m).forward(x); };
    BuiltModel built{module, make_classification_task(forward)};
    if (auto note = class_count_note(c)) built.plan_rows.push_back(*note);
    return built;
  };
  return e;
}

const ModelRegistrar kResnetRegistered(resnet_entry());

}  // namespace

}  // namespace bellows::models
