// Glob patterns over block names (util/name_patterns.h): the selection in the names' order, each once, and a pattern
// that selects nothing named with its key and the names there are.
#include "bellows/util/name_patterns.h"

#include <gtest/gtest.h>

#include "bellows/util/error.h"
#include "test_util.h"

namespace bellows {
namespace {

using test_support::error_from;

TEST(NamePatterns, PatternsSelectNamesInTheirOrderOnce) {
  const std::vector<std::string> names = {"layers.0", "layers.1", "layers.10", "head"};
  EXPECT_EQ(select_names({"head", "layers.1*"}, names, "dist.fsdp_units"),
            (std::vector<std::string>{"layers.1", "layers.10", "head"}));
  EXPECT_EQ(select_names({"*", "layers.?"}, names, "checkpointing"), names);  // `*` matches dots; each name once
  EXPECT_TRUE(select_names({}, names, "checkpointing").empty());
}

TEST(NamePatterns, APatternThatSelectsNothingNamesItsKeyAndTheNames) {
  const Error e = error_from([] { select_names({"layers.*", "decoder.*"}, {"layers.0", "head"}, "dist.fsdp_units"); });
  EXPECT_EQ(e.kind(), ErrorKind::kConfig);
  EXPECT_EQ(e.message(), "dist.fsdp_units: pattern 'decoder.*' matches no block of the model");
  EXPECT_EQ(e.hint(), "blocks: layers.0, head");
  EXPECT_EQ(error_from([] { select_names({"x"}, {}, "checkpointing"); }).hint(),
            "this model has no checkpointable blocks");
}

}  // namespace
}  // namespace bellows
