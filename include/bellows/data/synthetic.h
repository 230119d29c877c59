// Deterministic synthetic datasets for the embedded demo and tests: inputs from the seed and targets from a
// fixed random "teacher" (a network, class templates, a shift), so a model can learn them and the loss visibly
// falls. One kind per shape of data a built-in model reads, so that the demo can train every model
// (models::ModelDemo): tables, sequences, images, token pairs and gridded fields.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "bellows/data/dataset.h"  // defines: DataFacts

namespace bellows::data {

struct SyntheticOptions {
  // regression:     x [N, features], y [N, targets] = teacher(x) + noise
  // classification: x [N, features], y int64 [N] = argmax teacher(x) over `classes`
  // sequences:      x [N, steps, features], y [N, 1] = the teacher of every step, recent steps weighted most, + noise
  // images:         x [N, channels, side, side] = the class's smooth template + unit noise, y int64 [N] class
  // pairs:          x int64 [N, 2 steps + 3] = [CLS] premise [SEP] hypothesis [SEP], segments int64 (0, then 1
  //                 after the first [SEP]), y int64 [N]: the words of a sentence share a group (id - 3 mod
  //                 classes), the hypothesis's group is the premise's plus y; facts: the vocabulary (pad 0,
  //                 [CLS] 1, [SEP] 2), classes and length
  // grid:           x [N, channels, side, side] smooth fields, y the same fields one step later (moved one point
  //                 east, each channel nudged towards the next); facts: lat/lon in degrees, channel names c0, c1, ...
  std::string kind = "regression";
  std::int64_t samples = 16384;
  std::int64_t features = 64;    // regression, classification, sequences (per step)
  std::int64_t targets = 1;      // regression: values per sample
  std::int64_t classes = 10;     // classification, images, pairs
  std::int64_t steps = 16;       // sequences: steps; pairs: tokens per sentence
  std::int64_t channels = 3;     // images, grid
  std::int64_t side = 16;        // images, grid: points per side
  std::int64_t vocab_size = 32;  // pairs: token ids, the 3 special ones included
  double noise = 0.05;           // regression, sequences: std of the noise added to the targets
  std::uint64_t seed = 0;
};

// The kinds above, in that order (the choices of data.kind).
const std::vector<std::string>& synthetic_kinds();

// The tensors of the kind above: "x", "y" and, for pairs, "segments". kConfig errors for sizes out of range.
std::map<std::string, at::Tensor> make_synthetic(const SyntheticOptions& options);

// What a model learns from the data beyond the shapes (pairs: text facts; grid: grid facts; else none), from the
// options alone: the same for the data and for a model rebuilt from a checkpoint's config.
DataFacts synthetic_facts(const SyntheticOptions& options);

// Splits tensors along the first dimension: the first (1 - fraction) for training, the rest for validation.
std::pair<std::map<std::string, at::Tensor>, std::map<std::string, at::Tensor>> split_tail(
    const std::map<std::string, at::Tensor>& tensors, double fraction);

}  // namespace bellows::data
