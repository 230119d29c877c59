// Shared by the config tests: the schema they validate against, catching an expected bellows::Error, and a
// comparable snapshot of a config's leaves (text, type and quoting) for round-trip checks.
#pragma once

#include <gtest/gtest.h>

#include <functional>
#include <map>
#include <string>

#include "bellows/config/config.h"
#include "bellows/config/schema.h"
#include "bellows/util/error.h"
#include "test_util.h"
#include "test_paths.h"

namespace bellows::config::test_support {

inline const std::string kDataDir = BELLOWS_TEST_DATA_DIR + "/config";

// A schema shaped like a training run's, with every type, bound, choice list, alias, common name and a free subtree.
inline Schema test_schema() {
  Schema s;
  s.add("seed", Type::kInt, "random seed").default_value(YAML::Node(0));
  s.add("precision", Type::kString, "numeric precision")
      .choices({"fp32", "tf32", "bf16-mixed", "fp16-mixed", "auto"})
      .default_value(YAML::Node("auto"));
  s.add("model.name", Type::kString, "registry name of the model").required();
  s.add("model.dropout", Type::kDouble, "dropout probability").min(0).max(1).default_value(YAML::Node(0.0));
  s.allow_free_subtree("model.args");
  s.add("optim.name", Type::kString, "optimizer").choices({"sgd", "adamw"}).default_value(YAML::Node("adamw"));
  s.add("optim.lr", Type::kDouble, "peak learning rate").min(0).default_value(YAML::Node(0.1));
  s.add("optim.momentum", Type::kDouble, "momentum").min(0).max(1).default_value(YAML::Node(0.9));
  s.add("data.batch_size", Type::kInt, "samples per step").min(1).default_value(YAML::Node(32));
  s.add("data.workers", Type::kInt, "loader threads").min(0).default_value(YAML::Node(2));
  s.add("data.tags", Type::kStringList, "labels").default_value(YAML::Load("[]"));
  s.add("data.shuffle", Type::kBool, "shuffle every epoch").default_value(YAML::Node(true));
  s.add("data.sizes", Type::kIntList, "crop sizes").min(1);
  s.add("data.weights", Type::kDoubleList, "class weights");
  s.add("data.val_path", Type::kString, "validation data (empty: split off)").default_value(YAML::Load("''"));
  s.add("data.limit", Type::kInt, "samples used (unset: all)").min(1);
  s.add("schedule", Type::kString, "learning-rate schedule").default_value(YAML::Node("constant"));
  s.alias("--batch-size", "data.batch_size");
  s.alias("--lr", "optim.lr");
  s.common_name("learning_rate", "optim.lr");
  s.common_name("num_workers", "data.workers");
  return s;
}

using bellows::test_support::error_from;

// One leaf as text: its type, whether it is a forced (quoted) string, and its scalar text, recursively.
inline std::string leaf_text(const YAML::Node& node) {
  switch (node.Type()) {
    case YAML::NodeType::Null: return "null";
    case YAML::NodeType::Scalar: {
      const bool forced = node.Tag() == "!" || node.Tag() == "tag:yaml.org,2002:str";
      return (forced ? "str:" : "plain:") + node.Scalar();
    }
    case YAML::NodeType::Sequence: {
      std::string text = "[";
      for (const auto& element : node) text += leaf_text(element) + ",";
      return text + "]";
    }
    case YAML::NodeType::Map: {
      std::map<std::string, std::string> entries;
      for (const auto& entry : node) entries[entry.first.Scalar()] = leaf_text(entry.second);
      std::string text = "{";
      for (const auto& [k, v] : entries) text += k + "=" + v + ",";
      return text + "}";
    }
    default: return "undefined";
  }
}

inline std::map<std::string, std::string> leaves(const Config& config) {
  std::map<std::string, std::string> out;
  for (const auto& key : config.leaf_keys()) out[key] = leaf_text(config.node(key));
  return out;
}

}  // namespace bellows::config::test_support
