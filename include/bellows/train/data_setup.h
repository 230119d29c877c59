// The config's data block: its keys (for the run schema), the DataSpec it describes, and the loaders a run
// trains and evaluates with. `bellows train` and `bellows bench data` share this, so both read data the same way.
#pragma once

#include <memory>

#include "bellows/config/config.h"  // defines: Config
#include "bellows/config/schema.h"  // defines: Schema
#include "bellows/data/build.h"     // defines: DataSpec, DataSplits
#include "bellows/data/loader.h"    // defines: Loader, LoaderOptions
#include "bellows/plan/plan.h"      // defines: Plan

namespace bellows::train {

void add_data_keys(config::Schema& schema);

// Reads a validated config; kConfig errors name the key and its origin.
data::DataSpec data_spec(const config::Config& config);
data::LoaderOptions loader_options(const config::Config& config, const plan::Plan& plan);
// The sampler for `dataset` (weights from its labels for data.weights: balanced).
data::SamplerOptions sampler_options(const config::Config& config, const data::Dataset& dataset);

struct Loaders {
  data::DataSplits splits;
  std::unique_ptr<data::Loader> train;
  std::unique_ptr<data::Loader> val;  // null without validation data
};

// Datasets, samplers and loaders on the plan's device; evaluation loads in order, without augmentation.
Loaders make_loaders(const config::Config& config, const plan::Plan& plan);

}  // namespace bellows::train
