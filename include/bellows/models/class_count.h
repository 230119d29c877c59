// The classifiers' class count under one name: `model.out_features` with `model.task: classification`, as the mlp,
// lstm/gru and transformer take it. The image and sentence-pair classifiers (resnet, text_pair) called it
// `model.num_classes`; that key is still read, as the old name of model.out_features, and the plan says so.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "bellows/config/schema.h"    // defines: Schema, Config
#include "bellows/models/registry.h"  // defines: ModelIo, ModelPlanRow

namespace bellows::models {

// The keys as configured.
struct ClassCountOptions {
  std::string task = "classification";      // model.task (classification, the only choice)
  std::int64_t out_features = 0;            // model.out_features (0: from the data)
  std::optional<std::int64_t> num_classes;  // the deprecated model.num_classes, where the config sets it
};

// Declares model.task (classification, the only choice), model.out_features (default 0: `zero_means`) and the
// deprecated model.num_classes (no default), bound to ClassCountOptions.
void declare_class_count(config::Schema& schema, const std::string& zero_means);

struct ClassCount {
  std::int64_t value = 0;  // 0: from the data
  std::string key;         // the key that gave it ("model.out_features", or the deprecated "model.num_classes"), for messages
};

// The configured count. model.num_classes alone counts; both keys set to different values is a kConfig error naming both.
ClassCount read_class_count(const config::Config& config);

// The plan row that says model.num_classes is deprecated, where a config used it.
std::optional<ModelPlanRow> class_count_note(const config::Config& config);

// The classifier's ModelEntry::io: model.out_features as configured (not model.num_classes) and model.task.
ModelIo class_count_io(const config::Config& config);

}  // namespace bellows::models
