// The top-operators table of a traced window: self time is an event's time less that of the events nested in it
// on its thread; the trainer's bellows::* scopes are not operators; device kernels get their own table.
#include <gtest/gtest.h>

#include "bellows/obs/profile.h"

#include <sstream>

namespace bellows::obs {
namespace {

// The whitespace-separated fields of the table row of `name`.
std::vector<std::string> row_of(const std::string& table, const std::string& name) {
  std::istringstream lines(table);
  for (std::string line; std::getline(lines, line);) {
    std::istringstream fields(line);
    std::vector<std::string> out;
    for (std::string f; fields >> f;) out.push_back(f);
    if (!out.empty() && out[0] == name) return out;
  }
  return {};
}

TEST(ProfileTable, SelfTimeSubtractsNestedEventsPerThread) {
  constexpr std::uint64_t us = 1000;  // events are in ns
  const std::vector<TracedEvent> events{
      {"bellows::forward", 1, 0, 300 * us, false},
      {"aten::linear", 1, 0, 100 * us, false},      // holds addmm and t
      {"aten::addmm", 1, 10 * us, 70 * us, false},  // 60 us, a leaf
      {"aten::t", 1, 80 * us, 90 * us, false},      // 10 us, a leaf
      {"aten::addmm", 2, 0, 40 * us, false},        // another thread: not nested in anything
      {"aten::relu", 1, 150 * us, 170 * us, false},
      {"gemm_kernel", 0, 0, 50 * us, true},
      {"gemm_kernel", 0, 60 * us, 80 * us, true},
  };
  const std::string table = top_operators_table(events);
  EXPECT_EQ(table.find("bellows::forward"), std::string::npos) << table;
  // aten::addmm: 2 calls, 100 us total and self; aten::linear: 100 us total, 30 us self; relu 20; t 10.
  const auto addmm = table.find("aten::addmm"), linear = table.find("aten::linear"), relu = table.find("aten::relu"),
             t = table.find("aten::t ");
  ASSERT_NE(addmm, std::string::npos) << table;
  EXPECT_LT(addmm, linear);
  EXPECT_LT(linear, relu);
  EXPECT_LT(relu, t);
  EXPECT_EQ(row_of(table, "aten::addmm"), (std::vector<std::string>{"aten::addmm", "2", "0.100", "0.100", "62.5%"})) << table;
  EXPECT_EQ(row_of(table, "aten::linear"), (std::vector<std::string>{"aten::linear", "1", "0.100", "0.030", "18.8%"})) << table;
  const std::vector<std::string> t_row = row_of(table, "aten::t");
  ASSERT_EQ(t_row.size(), 5u) << table;
  EXPECT_EQ(std::vector<std::string>(t_row.begin(), t_row.begin() + 4), (std::vector<std::string>{"aten::t", "1", "0.010", "0.010"}));
  EXPECT_NE(table.find("top device kernels"), std::string::npos) << table;
  EXPECT_EQ(row_of(table, "gemm_kernel"), (std::vector<std::string>{"gemm_kernel", "2", "0.070", "100.0%"})) << table;
}

}  // namespace
}  // namespace bellows::obs
