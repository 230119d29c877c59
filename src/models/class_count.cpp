// The classifiers' class count; see class_count.h.
#include "bellows/models/class_count.h"

#include <fmt/format.h>

#include "bellows/config/binding.h"  // defines: Binding, bound
#include "bellows/util/check.h"

namespace bellows::models {

namespace {
constexpr const char* kOut = "model.out_features";
constexpr const char* kOld = "model.num_classes";

// The keys of ClassCountOptions; `zero_means` only words model.out_features' help.
config::Binding<ClassCountOptions> class_count_keys(const std::string& zero_means) {
  using O = ClassCountOptions;
  config::Binding<O> b("model.");
  b.key("task", &O::task, "training objective").choices({"classification"});
  b.key("out_features", &O::out_features, fmt::format("classes (0: {})", zero_means)).min(0);
  b.custom("num_classes", config::Type::kInt, "deprecated: the old name of model.out_features",
           [](const config::Config& c, const std::string& key, O& o) {
             if (c.has(key)) o.num_classes = config::get_int(c, key);  // no default: set or absent
           })
      .min(0);
  return b;
}

// For reading (the help text plays no part).
const config::Binding<ClassCountOptions>& class_count_binding() {
  static const config::Binding<ClassCountOptions> binding = class_count_keys("");
  return binding;
}

}  // namespace

void declare_class_count(config::Schema& s, const std::string& zero_means) { class_count_keys(zero_means).declare(s); }

ClassCount read_class_count(const config::Config& c) {
  const ClassCountOptions o = class_count_binding().read(c);
  if (!o.num_classes) return {o.out_features, kOut};
  const std::int64_t old = *o.num_classes;
  BELLOWS_CHECK_CONFIG(c.is_schema_default(kOut) || o.out_features == old,
                       fmt::format("model.num_classes is {} ({}) and model.out_features is {} ({}): model.num_classes is the old name "
                                   "of model.out_features", old, c.origin(kOld).str(), o.out_features, c.origin(kOut).str()),
                       "keep model.out_features and remove model.num_classes");
  return {old, kOld};
}

std::optional<ModelPlanRow> class_count_note(const config::Config& c) {
  const ClassCountOptions o = class_count_binding().read(c);
  if (!o.num_classes) return std::nullopt;
  return ModelPlanRow{kOld, std::to_string(*o.num_classes),
                      fmt::format("deprecated ({}): the old name of model.out_features, which it sets; rename it", c.origin(kOld).str())};
}

ModelIo class_count_io(const config::Config& c) {
  const ClassCountOptions o = class_count_binding().read(c);
  return ModelIo{std::nullopt, o.out_features, std::nullopt, o.task};
}

}  // namespace bellows::models
