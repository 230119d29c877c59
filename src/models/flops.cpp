// Analytic forward FLOPs of the built-in layers; see flops.h.
#include "bellows/models/flops.h"

namespace bellows::models {

double linear_flops(double rows, std::int64_t in, std::int64_t out, bool bias) {
  return rows * (2.0 * static_cast<double>(in) * static_cast<double>(out) + (bias ? static_cast<double>(out) : 0.0));
}

double conv2d_flops(std::int64_t batch, std::int64_t in_channels, std::int64_t out_channels, std::int64_t kh, std::int64_t kw,
                    std::int64_t h_out, std::int64_t w_out, std::int64_t groups, bool bias) {
  const double outputs = static_cast<double>(batch) * static_cast<double>(out_channels) * static_cast<double>(h_out) * static_cast<double>(w_out);
  return outputs * (2.0 * static_cast<double>(in_channels / groups) * static_cast<double>(kh * kw) + (bias ? 1.0 : 0.0));
}

double attention_flops(std::int64_t batch, std::int64_t length, std::int64_t d_model) {
  const double rows = static_cast<double>(batch) * static_cast<double>(length);
  const double projections = 4.0 * linear_flops(rows, d_model, d_model, true);
  const double scores_and_sum = 2.0 * 2.0 * static_cast<double>(batch) * static_cast<double>(length) * static_cast<double>(length) *
                                static_cast<double>(d_model);
  return projections + scores_and_sum;
}

double recurrent_flops(std::int64_t steps, std::int64_t in_features, std::int64_t hidden, std::int64_t layers, bool bidirectional,
                       int gates) {
  const std::int64_t directions = bidirectional ? 2 : 1;
  double total = 0;
  for (std::int64_t layer = 0; layer < layers; ++layer) {
    const std::int64_t in = layer == 0 ? in_features : hidden * directions;
    const double per_step = linear_flops(1, in, gates * hidden, true) + linear_flops(1, hidden, gates * hidden, true);
    total += static_cast<double>(directions) * static_cast<double>(steps) * per_step;
  }
  return total;
}

double norm_flops(double elements) { return 5.0 * elements; }

}  // namespace bellows::models
