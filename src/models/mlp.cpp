// The MLP; see mlp.h.
#include "bellows/models/mlp.h"

#include <fmt/format.h>
#include <torch/nn/modules/activation.h>
#include <torch/nn/modules/batchnorm.h>
#include <torch/nn/modules/dropout.h>
#include <torch/nn/modules/linear.h>
#include <torch/nn/modules/normalization.h>

#include "bellows/util/check.h"

namespace bellows::models {
namespace {

void add_activation(torch::nn::Sequential& seq, const std::string& name) {
  if (name == "gelu") {
    seq->push_back(torch::nn::GELU());
  } else if (name == "relu") {
    seq->push_back(torch::nn::ReLU());
  } else if (name == "silu") {
    seq->push_back(torch::nn::SiLU());
  } else if (name == "tanh") {
    seq->push_back(torch::nn::Tanh());
  } else {
    BELLOWS_FAIL(ErrorKind::kConfig, fmt::format("unknown activation '{}'", name), "use one of: gelu, relu, silu, tanh");
  }
}

}  // namespace

MlpImpl::MlpImpl(const MlpOptions& options) : options_(options) {
  BELLOWS_CHECK_CONFIG(options.in_features > 0 && options.out_features > 0,
                       fmt::format("MLP in_features={} out_features={}, expected positive", options.in_features, options.out_features),
                       "set model.in_features and model.out_features");
  BELLOWS_CHECK_CONFIG(options.norm == "none" || options.norm == "layer" || options.norm == "batch",
                       fmt::format("unknown norm '{}'", options.norm), "use one of: none, layer, batch");
  BELLOWS_CHECK_CONFIG(options.dropout >= 0 && options.dropout < 1, fmt::format("dropout {} outside [0, 1)", options.dropout),
                       "set model.dropout between 0 and 1");
  torch::nn::Sequential seq;
  std::int64_t width = options.in_features;
  for (const std::int64_t h : options.hidden) {
    BELLOWS_CHECK_CONFIG(h > 0, fmt::format("hidden width {} is not positive", h), "set model.hidden to positive widths");
    seq->push_back(torch::nn::Linear(width, h));
    if (options.norm == "layer") seq->push_back(torch::nn::LayerNorm(torch::nn::LayerNormOptions({h})));
    if (options.norm == "batch") seq->push_back(torch::nn::BatchNorm1d(h));
    add_activation(seq, options.activation);
    if (options.dropout > 0) seq->push_back(torch::nn::Dropout(options.dropout));
    width = h;
  }
  seq->push_back(torch::nn::Linear(width, options.out_features));
  layers_ = register_module("layers", seq);
}

at::Tensor MlpImpl::forward(const at::Tensor& x) { return layers_->forward(x); }

}  // namespace bellows::models
