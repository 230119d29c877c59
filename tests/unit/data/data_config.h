// A validated config of only the dataset keys (data.* of every registered source, and seed), for tests that
// build datasets the way a run does (data::build_datasets).
#pragma once

#include <string>

#include "bellows/config/schema.h"
#include "bellows/data/build.h"

namespace bellows::test_support {

inline config::Config data_config(const std::string& yaml) {
  config::Config c = config::Config::parse(yaml, "test.yaml");
  config::Schema s;
  s.add("seed", config::Type::kInt, "seed").default_value(YAML::Node(0));
  data::add_dataset_keys(s);
  s.validate(c);
  return c;
}

}  // namespace bellows::test_support
