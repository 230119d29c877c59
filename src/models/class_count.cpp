// The classifiers' class count; see class_count.h.
#include "bellows/models/class_count.h"

#include <fmt/format.h>

#include "bellows/util/check.h"

namespace bellows::models {

namespace {
constexpr const char* kOut = "model.out_features";
constexpr const char* kOld = "model.num_classes";
}  // namespace

void declare_class_count(config::Schema& s, const std::string& zero_means) {
  s.add("model.task", config::Type::kString, "training objective").choices({"classification"}).default_value(YAML::Node("classification"));
  s.add(kOut, config::Type::kInt, fmt::format("classes (0: {})", zero_means)).min(0).default_value(YAML::Node(0));
  s.add(kOld, config::Type::kInt, "deprecated: the old name of model.out_features").min(0);
}

ClassCount read_class_count(const config::Config& c) {
  const std::int64_t out = config::get_int(c, kOut);
  if (!c.has(kOld)) return {out, kOut};
  const std::int64_t old = config::get_int(c, kOld);
  BELLOWS_CHECK_CONFIG(c.is_schema_default(kOut) || out == old,
                       fmt::format("model.num_classes is {} ({}) and model.out_features is {} ({}): model.num_classes is the old name "
                                   "of model.out_features", old, c.origin(kOld).str(), out, c.origin(kOut).str()),
                       "keep model.out_features and remove model.num_classes");
  return {old, kOld};
}

std::optional<ModelPlanRow> class_count_note(const config::Config& c) {
  if (!c.has(kOld)) return std::nullopt;
  return ModelPlanRow{kOld, std::to_string(config::get_int(c, kOld)),
                      fmt::format("deprecated ({}): the old name of model.out_features, which it sets; rename it", c.origin(kOld).str())};
}

}  // namespace bellows::models
