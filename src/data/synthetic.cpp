// Synthetic datasets; see synthetic.h.
#include "bellows/data/synthetic.h"

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cmath>

#include "bellows/util/check.h"

namespace bellows::data {

namespace {

constexpr std::int64_t kTeacherHidden = 32;
// pairs: the special token ids; content tokens are kFirstWordId .. vocab_size - 1.
constexpr std::int64_t kPadId = 0, kClsId = 1, kSepId = 2, kFirstWordId = 3;

using SyntheticTensors = std::map<std::string, at::Tensor>;

at::TensorOptions float32s() {
  return at::TensorOptions().dtype(at::kFloat);
}
at::TensorOptions int64s() {
  return at::TensorOptions().dtype(at::kLong);
}

void check_positive_size(std::int64_t value, const char* key, const SyntheticOptions& o) {
  BELLOWS_CHECK_CONFIG(value > 0, fmt::format("synthetic {} data needs {} > 0 (got {})", o.kind, key, value),
                       fmt::format("set data.{}", key));
}

// The first layer of the teacher network, W1 [features, 32], scaled to unit-variance products; its hidden layer
// is tanh(2 x W1). Drawn before the inputs: the demo's numbers (README) depend on the order of the draws.
at::Tensor teacher_first_layer(std::int64_t features, at::Generator& gen) {
  return at::randn({features, kTeacherHidden}, gen, float32s()) / std::sqrt(static_cast<double>(features));
}

// Smooth random fields [n, channels, side, side] of unit standard deviation: noise on a 4 x 4 lattice (or
// coarser for a small side), interpolated, so that neighbouring points are alike (a convolution or a mesh has
// structure to find).
at::Tensor smooth_fields(std::int64_t n, std::int64_t channels, std::int64_t side, at::Generator& gen) {
  const std::int64_t coarse = std::clamp<std::int64_t>(side / 4, 2, 4);
  const at::Tensor fields =
      at::upsample_bilinear2d(at::randn({n, channels, coarse, coarse}, gen, float32s()), {side, side},
                              /*align_corners=*/false);
  return fields / fields.std().clamp_min(1e-6);
}

SyntheticTensors make_table(const SyntheticOptions& o, at::Generator& gen) {
  check_positive_size(o.features, "features", o);
  const at::Tensor w1 = teacher_first_layer(o.features, gen);
  const at::Tensor x = at::randn({o.samples, o.features}, gen, float32s());
  const at::Tensor h = at::tanh(at::matmul(x, w1) * 2.0);
  if (o.kind == "regression") {
    check_positive_size(o.targets, "targets", o);
    const at::Tensor w2 =
        at::randn({kTeacherHidden, o.targets}, gen, float32s()) / std::sqrt(static_cast<double>(kTeacherHidden));
    const at::Tensor y = at::matmul(h, w2) + o.noise * at::randn({o.samples, o.targets}, gen, float32s());
    return {{"x", x}, {"y", y}};
  }
  const at::Tensor w2 = at::randn({kTeacherHidden, o.classes}, gen, float32s());
  return {{"x", x}, {"y", at::matmul(h, w2).argmax(1)}};
}

// The teacher of each step, summed with weights 0.8^(age) normalised to unit sum of squares: the latest steps
// count most and the order of the steps matters, as in a forecast from a window.
SyntheticTensors make_sequences(const SyntheticOptions& o, at::Generator& gen) {
  check_positive_size(o.features, "features", o);
  check_positive_size(o.steps, "steps", o);
  const at::Tensor w1 = teacher_first_layer(o.features, gen);
  const at::Tensor x = at::randn({o.samples, o.steps, o.features}, gen, float32s());
  const at::Tensor h = at::tanh(at::matmul(x, w1) * 2.0);  // [N, T, 32]
  const at::Tensor w2 =
      at::randn({kTeacherHidden, 1}, gen, float32s()) / std::sqrt(static_cast<double>(kTeacherHidden));
  const at::Tensor age = at::arange(o.steps - 1, -1, -1, float32s());
  at::Tensor weights = at::pow(0.8, age);
  weights = weights / weights.square().sum().sqrt();
  const at::Tensor y = (at::matmul(h, w2).squeeze(2) * weights).sum(1, /*keepdim=*/true) +
                       o.noise * at::randn({o.samples, 1}, gen, float32s());
  return {{"x", x}, {"y", y}};
}

// One smooth template per class under unit noise: a signal-to-noise ratio of 1 per pixel, which a convolution
// averages away and a lookup of single pixels cannot.
SyntheticTensors make_images(const SyntheticOptions& o, at::Generator& gen) {
  check_positive_size(o.channels, "channels", o);
  check_positive_size(o.side, "side", o);
  const at::Tensor templates = smooth_fields(o.classes, o.channels, o.side, gen);
  const at::Tensor y = at::randint(0, o.classes, {o.samples}, gen, int64s());
  const at::Tensor x =
      templates.index_select(0, y) + at::randn({o.samples, o.channels, o.side, o.side}, gen, float32s());
  return {{"x", x}, {"y", y}};
}

// Words fall into `classes` groups by their id (group (id - 3) mod classes); every word of a sentence is of one
// group, the premise's drawn at random, the hypothesis's the premise's plus the label (mod classes). Neither sentence
// alone tells the label: the classifier must relate the two, as an entailment model does. (A relation of single
// words, such as how many of the premise's the hypothesis repeats, took a small Transformer hundreds of steps;
// groups are learnt within the demo's.)
SyntheticTensors make_pairs(const SyntheticOptions& o, at::Generator& gen) {
  check_positive_size(o.steps, "steps", o);
  const std::int64_t per_group = (o.vocab_size - kFirstWordId) / o.classes;
  BELLOWS_CHECK_CONFIG(
      per_group >= 1,
      fmt::format("synthetic pairs with data.vocab_size {} have {} words, fewer than data.classes {}: a group "
                  "of words per class",
                  o.vocab_size, o.vocab_size - kFirstWordId, o.classes),
      fmt::format("set data.vocab_size to at least {}", o.classes + kFirstWordId));
  const at::Tensor group = at::randint(0, o.classes, {o.samples, 1}, gen, int64s());
  const at::Tensor y = at::randint(0, o.classes, {o.samples}, gen, int64s());
  const auto sentence = [&](const at::Tensor& g) {
    return kFirstWordId + g + o.classes * at::randint(0, per_group, {o.samples, o.steps}, gen, int64s());
  };
  const at::Tensor premise = sentence(group);
  const at::Tensor hypothesis = sentence((group + y.unsqueeze(1)).remainder(o.classes));
  const at::Tensor cls = at::full({o.samples, 1}, kClsId, int64s()), sep = at::full({o.samples, 1}, kSepId, int64s());
  const at::Tensor x = at::cat({cls, premise, sep, hypothesis, sep}, 1);
  const at::Tensor segments =
      at::cat({at::zeros({o.samples, o.steps + 2}, int64s()), at::ones({o.samples, o.steps + 1}, int64s())}, 1);
  return {{"x", x}, {"segments", segments}, {"y", y}};
}

// A forecast's step: the fields move one point east, and each channel moves a tenth of the way towards the next.
SyntheticTensors make_grid(const SyntheticOptions& o, at::Generator& gen) {
  check_positive_size(o.channels, "channels", o);
  BELLOWS_CHECK_CONFIG(
      o.side >= 2,
      fmt::format("synthetic grid data needs data.side >= 2 (got {}): a mesh needs two points per side", o.side),
      "set data.side");
  const at::Tensor x = smooth_fields(o.samples, o.channels, o.side, gen);
  const at::Tensor y = at::roll(x, {1}, {3}) + 0.1 * (at::roll(x, {-1}, {1}) - x);
  return {{"x", x}, {"y", y}};
}

}  // namespace

const std::vector<std::string>& synthetic_kinds() {
  static const std::vector<std::string> kinds{"regression", "classification", "sequences", "images", "pairs", "grid"};
  return kinds;
}

std::map<std::string, at::Tensor> make_synthetic(const SyntheticOptions& o) {
  BELLOWS_CHECK_CONFIG(std::find(synthetic_kinds().begin(), synthetic_kinds().end(), o.kind) != synthetic_kinds().end(),
                       fmt::format("unknown synthetic kind '{}'", o.kind),
                       fmt::format("set data.kind to one of: {}", fmt::join(synthetic_kinds(), ", ")));
  check_positive_size(o.samples, "samples", o);
  BELLOWS_CHECK_CONFIG(o.kind == "regression" || o.kind == "sequences" || o.kind == "grid" || o.classes >= 2,
                       fmt::format("synthetic {} data with {} classes", o.kind, o.classes),
                       "set data.classes to 2 or more");
  auto gen = at::make_generator<at::CPUGeneratorImpl>(o.seed);
  if (o.kind == "sequences") return make_sequences(o, gen);
  if (o.kind == "images") return make_images(o, gen);
  if (o.kind == "pairs") return make_pairs(o, gen);
  if (o.kind == "grid") return make_grid(o, gen);
  return make_table(o, gen);
}

DataFacts synthetic_facts(const SyntheticOptions& o) {
  DataFacts f;
  if (o.kind == "pairs") f.text = TextFacts{o.vocab_size, o.classes, kPadId, 2 * o.steps + 3};
  if (o.kind == "grid") {
    // A 10 x 10 degree region whatever the side: the mesh's geometry stays that of a regional model.
    GridFacts g;
    for (std::int64_t i = 0; i < o.side; ++i) {
      const double t = o.side > 1 ? static_cast<double>(i) / static_cast<double>(o.side - 1) : 0.0;
      g.lat.push_back(40.0 + 10.0 * t);
      g.lon.push_back(10.0 * t);
    }
    for (std::int64_t c = 0; c < o.channels; ++c) g.input_channels.push_back(fmt::format("c{}", c));
    g.target_channels = g.input_channels;
    f.grid = std::move(g);
  }
  return f;
}

std::pair<std::map<std::string, at::Tensor>, std::map<std::string, at::Tensor>> split_tail(
    const std::map<std::string, at::Tensor>& tensors, double fraction) {
  BELLOWS_CHECK_CONFIG(fraction >= 0 && fraction < 1, fmt::format("validation fraction {} outside [0, 1)", fraction),
                       "set data.val_fraction between 0 and 1");
  std::map<std::string, at::Tensor> train, val;
  for (const auto& [name, t] : tensors) {
    const std::int64_t n = t.size(0);
    const std::int64_t n_val = static_cast<std::int64_t>(std::floor(n * fraction));
    train.emplace(name, t.slice(0, 0, n - n_val));
    if (n_val > 0) val.emplace(name, t.slice(0, n - n_val, n));
  }
  return {train, val};
}

}  // namespace bellows::data
