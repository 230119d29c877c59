// ResNet-18/34 (workload W4, seed 001's backbone): BasicBlocks [2, 2, 2, 2] or [3, 4, 6, 3], BatchNorm,
// global average pooling and a linear head, named like torchvision's resnet18/34 so that their state_dict
// loads by name. Each block can be activation-checkpointed; the recomputation in backward uses the batch's
// statistics without updating BatchNorm's running statistics a second time.
#pragma once

#include <ATen/core/Tensor.h>
#include <torch/nn/module.h>
#include <torch/nn/modules/batchnorm.h>
#include <torch/nn/modules/container/modulelist.h>
#include <torch/nn/modules/container/sequential.h>
#include <torch/nn/modules/conv.h>
#include <torch/nn/modules/linear.h>
#include <torch/nn/pimpl.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "bellows/models/activation_checkpoint.h"  // defines: Checkpointable

namespace bellows::models {

struct ResNetOptions {
  std::int64_t depth = 18;  // 18 | 34
  double width = 1.0;       // channel multiplier; see resnet_base_channels()
  std::int64_t in_channels = 3;
  std::int64_t num_classes = 1000;
  std::string stem = "imagenet";    // imagenet: 7x7 stride-2 conv + 3x3 stride-2 max pool; small: 3x3 stride-1 conv
  bool zero_init_residual = false;  // each block's last BatchNorm starts at weight 0 (the block starts as identity)
};

// Channels of the first stage (the later stages have 2x, 4x, 8x): 64 x width rounded to the nearest multiple
// of 8 (SIMD- and tensor-core-friendly widths), at least 8. width 1 -> 64, 0.5 -> 32, 0.125 -> 8, 0.1 -> 8.
// kConfig error for width <= 0.
std::int64_t resnet_base_channels(double width);

// Analytic FLOPs of one forward pass of one image of height x width (models/flops.h conventions): every
// convolution, every BatchNorm (5 per element) and the head; max pooling, the residual additions and the global
// average pool are not counted (LibTorch's counter does not count them either). kConfig error for a size the
// stem cannot take (below 1 pixel after it).
double resnet_forward_flops(const ResNetOptions& options, std::int64_t height, std::int64_t width);

// BatchNorm for the blocks: in training, while a checkpointed block is recomputed in backward (recomputing()),
// normalises with the batch's statistics and leaves running_mean/var and num_batches_tracked alone, so that a
// checkpointed step updates them exactly once, as a plain step does. Otherwise bn->forward(x).
at::Tensor batch_norm_once(torch::nn::BatchNorm2d& bn, const at::Tensor& x);

// torchvision's BasicBlock: conv1 (3x3, stride) bn1 relu conv2 (3x3) bn2, plus the shortcut, relu. The shortcut
// is "downsample" (0: 1x1 conv with the stride, 1: BatchNorm) where the stride or the width changes.
class BasicBlockImpl : public torch::nn::Module {
 public:
  BasicBlockImpl(std::int64_t in_planes, std::int64_t planes, std::int64_t stride);
  at::Tensor forward(const at::Tensor& x);

  torch::nn::Conv2d conv1{nullptr}, conv2{nullptr};
  torch::nn::BatchNorm2d bn1{nullptr}, bn2{nullptr};
  torch::nn::Sequential downsample{nullptr};  // null: identity shortcut

 private:
  torch::nn::Conv2d down_conv_{nullptr};  // downsample[0] and [1], held typed
  torch::nn::BatchNorm2d down_bn_{nullptr};
};
TORCH_MODULE(BasicBlock);

// Module names (torchvision's): conv1, bn1, [maxpool], layer1..layer4 (".<i>" per block; in each block conv1,
// bn1, conv2, bn2, downsample.0, downsample.1), fc. With stem imagenet, width 1 and 3 input channels every
// tensor of torchvision's resnet18/resnet34 state_dict has the same name and shape here (fc too for 1000
// classes), the BatchNorm buffers running_mean, running_var and num_batches_tracked included; with stem small,
// conv1.weight is [base, C, 3, 3] instead of [64, C, 7, 7].
// Blocks for activation checkpointing: "layer1.0", "layer1.1", ..., "layer4.1" (18) / "layer4.2" (34).
class ResNetImpl : public torch::nn::Module, public Checkpointable {
 public:
  explicit ResNetImpl(const ResNetOptions& options);
  // x: floating [B, C, H, W] (the image folder's batches are normalised float32 by then); a floating dtype other
  // than the parameters' is cast to theirs outside autocast. Integer images (uint8 not yet normalised) and a
  // wrong channel count are kData errors. Returns logits [B, num_classes].
  at::Tensor forward(const at::Tensor& x);
  std::vector<std::string> checkpoint_blocks() const override;
  const ResNetOptions& options() const { return options_; }

 private:
  ResNetOptions options_;
  torch::nn::Conv2d conv1_{nullptr};
  torch::nn::BatchNorm2d bn1_{nullptr};
  std::vector<std::pair<std::string, BasicBlock>> blocks_;  // "layer1.0" -> block, in order
  torch::nn::Linear fc_{nullptr};
};
TORCH_MODULE(ResNet);

}  // namespace bellows::models
