// Analytic FLOPs of one forward pass of the built-in layers (a multiply-add counts 2), for the models that state
// theirs (ModelEntry::forward_flops): the number a run prints beside the FLOPs it counts from op shapes
// (obs/profile.h FlopCounter), so the two can be compared. Training costs about 3x the forward (the backward
// computes gradients for the inputs and for the weights; less where an input needs none, such as the data).
// Conventions: matrix products and their bias additions are counted; elementwise activations are not (as
// LibTorch's own counter); a normalisation counts 5 per element (mean, variance, normalise, scale, shift);
// an embedding lookup counts 0 (a gather).
#pragma once

#include <cstdint>

namespace bellows::models {

// `rows` inputs of `in` features through Linear(in, out): 2 rows in out (+ rows out for the bias).
double linear_flops(double rows, std::int64_t in, std::int64_t out, bool bias = true);

// Conv2d over a batch: 2 batch out_channels h_out w_out (in_channels / groups) kh kw (+ the bias per output).
double conv2d_flops(std::int64_t batch, std::int64_t in_channels, std::int64_t out_channels, std::int64_t kh, std::int64_t kw,
                    std::int64_t h_out, std::int64_t w_out, std::int64_t groups = 1, bool bias = false);

// Multi-head self-attention over `batch` sequences of `length` tokens, model width d: the Q, K, V and output
// projections (4 Linear(d, d) with bias) plus scores Q K^T and the weighted sum of V (2 length^2 d each);
// the head count does not change the total.
double attention_flops(std::int64_t batch, std::int64_t length, std::int64_t d_model);

// A recurrent network of `layers` (each direction of each layer) over `steps` steps for one sequence: per step,
// the gates' input and hidden products with their two biases, `gates` = 4 (LSTM) or 3 (GRU).
double recurrent_flops(std::int64_t steps, std::int64_t in_features, std::int64_t hidden, std::int64_t layers, bool bidirectional,
                       int gates);

// Layer or batch normalisation of `elements` values: 5 per element.
double norm_flops(double elements);

}  // namespace bellows::models
