// safetensors: every corrupt-input error, from each reader (the header alone, read, mapped), with the file and the
// byte offsets in the message: missing, truncated at every stage, bad header lengths, bad JSON, unknown dtypes,
// shapes that disagree with their offsets, gaps and overlaps, duplicate names and bad metadata.
#include <ATen/ATen.h>
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <tuple>
#include <vector>

#include "bellows/ckpt/safetensors.h"
#include "bellows/util/error.h"
#include "safetensors_fixture.h"  // defines: le64, assemble, SafetensorsTest (expect_refused)
#include "test_util.h"

namespace bellows::ckpt {
namespace {

using safetensors_fixture::assemble;
using safetensors_fixture::le64;
using safetensors_fixture::SafetensorsTest;
using test_support::error_from;

class SafetensorsCorrupt : public SafetensorsTest {
 protected:
  void SetUp() override {
    SafetensorsTest::SetUp();
    bytes_ =
        safetensors_bytes({{"a", at::ones({2, 3})}, {"b", at::ones({2}, at::kLong)}, {"c", at::ones({3}, at::kByte)}},
                          {{"format", "pt"}});
    n_ = 0;
    for (int i = 7; i >= 0; --i) n_ = (n_ << 8) | static_cast<std::uint8_t>(bytes_[static_cast<std::size_t>(i)]);
    data_ = 8 + n_;
    ASSERT_EQ(bytes_.size(), data_ + 24 + 16 + 3);
  }
  std::string header() const { return bytes_.substr(8, n_); }
  // `bytes_` with the first `from` in its header replaced by `to` (of the same length).
  std::string replaced(const std::string& from, const std::string& to) const {
    std::string b = bytes_;
    const auto at = b.find(from, 8);
    EXPECT_NE(at, std::string::npos) << from;
    EXPECT_EQ(from.size(), to.size());
    return b.replace(at, from.size(), to);
  }
  std::string bytes_;
  std::uint64_t n_ = 0, data_ = 0;
};

TEST_F(SafetensorsCorrupt, MissingFileAndDirectory) {
  Error e = error_from([&] { read_safetensors(dir_ / "absent.safetensors"); });
  EXPECT_EQ(e.kind(), ErrorKind::kData);
  EXPECT_NE(e.message().find("absent.safetensors: no such file"), std::string::npos) << e.message();
  e = error_from([&] { read_safetensors_header(dir_); });
  EXPECT_EQ(e.kind(), ErrorKind::kData);
  EXPECT_NE(e.message().find("is a directory"), std::string::npos) << e.message();
}

TEST_F(SafetensorsCorrupt, TruncatedAtEveryStage) {
  for (std::size_t size : {0, 1, 7}) {
    expect_refused(bytes_.substr(0, size),
                   {fmt::format("{} bytes, shorter than the 8-byte header length at byte 0", size)});
  }
  for (std::uint64_t size : {std::uint64_t{8}, 8 + n_ / 2, data_ - 1}) {
    expect_refused(bytes_.substr(0, size), {fmt::format("header runs from byte 8 to byte {}, past the end of the "
                                                        "file ({} bytes)",
                                                        data_, size)});
  }
  // The data section cut: data order is b [0, 16], a [16, 40], c [40, 43]; the first tensor past the cut is named.
  const std::vector<std::tuple<std::uint64_t, std::string, std::uint64_t, std::uint64_t>> cuts = {
      {data_, "b", 0, 16}, {data_ + 20, "a", 16, 40}, {data_ + 42, "c", 40, 43}};
  for (const auto& [size, name, begin, end] : cuts) {
    expect_refused(bytes_.substr(0, size),
                   {fmt::format("tensor '{}' has data_offsets [{}, {}] (bytes {} to {} of the file)", name, begin, end,
                                data_ + begin, data_ + end),
                    fmt::format("outside the data section (bytes {} to {}, {} bytes)", data_, size, size - data_)});
  }
}

TEST_F(SafetensorsCorrupt, BadHeaderLength) {
  std::string b = bytes_;
  b.replace(0, 8, le64(std::uint64_t{1} << 40));
  expect_refused(b, {"the header length at byte 0 says 1099511627776 bytes, more than the format's limit"});
  b.replace(0, 8, le64(100'000'001));
  expect_refused(b, {"more than the format's limit of 100000000"});
  b.replace(0, 8, le64(bytes_.size()));
  expect_refused(b, {fmt::format("runs from byte 8 to byte {}, past the end", 8 + bytes_.size())});
  b.replace(0, 8, le64(n_ + 8));  // the header swallows the first 8 data bytes
  expect_refused(b, {fmt::format("(bytes 8 to {}) is not valid JSON, at byte", n_ + 16)});
  b.replace(0, 8, le64(n_ - 20));  // the header loses its end
  expect_refused(b, {"is not valid JSON, at byte"});
}

TEST_F(SafetensorsCorrupt, BadJson) {
  expect_refused(assemble("{\"a\": ", ""), {"(bytes 8 to 14) is not valid JSON, at byte"});
  expect_refused(assemble("", ""), {"not valid JSON"});
  expect_refused(assemble("[1, 2]", ""),
                 {"bad safetensors header (JSON at bytes 8 to 14)", "a JSON array, not an object"});
  expect_refused(assemble("{\"\xff\": 1}", ""), {"not valid JSON"});  // not UTF-8
  expect_refused(assemble(R"({"a":{"dtype":"U8","shape":[1],"data_offsets":[0,1]}} x)", "z"), {"not valid JSON"});
  expect_refused(assemble(R"({"a":3})", ""), {"tensor 'a' is described by a JSON number"});
  expect_refused(assemble(R"({"a":{"shape":[1],"data_offsets":[0,1]}})", "z"), {"tensor 'a' has no \"dtype\""});
  expect_refused(assemble(R"({"a":{"dtype":"U8","data_offsets":[0,1]}})", "z"), {"tensor 'a' has no \"shape\""});
  expect_refused(assemble(R"({"a":{"dtype":"U8","shape":[1]}})", "z"), {"tensor 'a' has no \"data_offsets\""});
  expect_refused(assemble(R"({"a":{"dtype":"U8","shape":[-1],"data_offsets":[0,1]}})", "z"),
                 {"tensor 'a': the shape [-1] holds something other than sizes"});
  expect_refused(assemble(R"({"a":{"dtype":"U8","shape":[1.5],"data_offsets":[0,1]}})", "z"),
                 {"tensor 'a': the shape"});
  expect_refused(assemble(R"({"a":{"dtype":"U8","shape":[1],"data_offsets":[0]}})", "z"),
                 {"tensor 'a': data_offsets must be [begin, end], found [0]"});
  expect_refused(assemble(R"({"a":{"dtype":"U8","shape":[1],"data_offsets":[-1,0]}})", "z"),
                 {"tensor 'a': data_offsets must be two non-negative integers, found -1"});
  expect_refused(assemble(R"({"a":{"dtype":"U8","shape":[4294967296,4294967296],"data_offsets":[0,1]}})", "z"),
                 {"tensor 'a': the shape [4294967296,4294967296] overflows"});
}

TEST_F(SafetensorsCorrupt, UnknownDtypeIsNamed) {
  expect_refused(replaced("\"F32\"", "\"X32\""), {"tensor 'a' has dtype 'X32'", "bellows does not read",
                                                  fmt::format("header at bytes 8 to {}", data_)});
  expect_refused(replaced("\"I64\"", "\"U64\""), {"tensor 'b' has dtype 'U64'"});  // valid safetensors, not here
  expect_refused(replaced("\"dtype\":\"U8\"", "\"dtype\":true"), {"tensor 'c': \"dtype\" is not a string"});
}

TEST_F(SafetensorsCorrupt, ShapeDisagreesWithOffsets) {
  expect_refused(replaced("[2,3]", "[3,3]"),
                 {"tensor 'a' is F32 [3, 3] = 36 bytes, but its data_offsets [16, 40]",
                  fmt::format("(bytes {} to {} of the file) hold 24", data_ + 16, data_ + 40)});
  expect_refused(replaced("\"F32\"", "\"F64\""), {"tensor 'a' is F64 [2, 3] = 48 bytes"});
  expect_refused(replaced("[2,3]", "[2,0]"), {"tensor 'a' is F32 [2, 0] = 0 bytes"});
}

TEST_F(SafetensorsCorrupt, OffsetsOutsideGapsAndOverlaps) {
  const std::string u8 = R"("dtype":"U8","shape":[2])";
  // Past the data section.
  expect_refused(
      assemble(fmt::format(R"({{"a":{{{},"data_offsets":[0,2]}},"b":{{{},"data_offsets":[2,4]}}}})", u8, u8), "xyz"),
      {"tensor 'b' has data_offsets [2, 4]", "outside the data section"});
  // Far past it (no overflow in the arithmetic).
  expect_refused(
      assemble(R"({"a":{"dtype":"U8","shape":[0],"data_offsets":[18446744073709551615,18446744073709551615]}})", ""),
      {"tensor 'a'", "outside the data section"});
  // Begins after it ends.
  expect_refused(assemble(R"({"a":{"dtype":"U8","shape":[0],"data_offsets":[2,0]}})", "xy"),
                 {"tensor 'a' has data_offsets [2, 0] that end before they begin"});
  // A gap between two tensors: data byte 2 of 5 belongs to none.
  std::string header = fmt::format(R"({{"a":{{{},"data_offsets":[0,2]}},"b":{{{},"data_offsets":[3,5]}}}})", u8, u8);
  std::uint64_t data = 8 + header.size();
  expect_refused(
      assemble(header, "abcde"),
      {fmt::format("a gap in the data section: bytes {} to {} of the file belong to no tensor", data + 2, data + 3),
       "tensor 'b'"});
  // A gap at the start.
  header = fmt::format(R"({{"a":{{{},"data_offsets":[1,3]}}}})", u8);
  data = 8 + header.size();
  expect_refused(assemble(header, "abc"),
                 {fmt::format("bytes {} to {} of the file belong to no tensor", data, data + 1)});
  // Overlap.
  header = fmt::format(R"({{"a":{{{},"data_offsets":[0,2]}},"b":{{{},"data_offsets":[1,3]}}}})", u8, u8);
  data = 8 + header.size();
  expect_refused(assemble(header, "abc"), {"tensors 'a' and 'b' overlap: data_offsets [0, 2] and [1, 3]",
                                           fmt::format("bytes {} to {} of the file are shared", data + 1, data + 2)});
  // The same bytes twice.
  header = fmt::format(R"({{"a":{{{},"data_offsets":[0,2]}},"b":{{{},"data_offsets":[0,2]}}}})", u8, u8);
  expect_refused(assemble(header, "ab"), {"tensors 'a' and 'b' overlap"});
  // Trailing bytes no tensor covers.
  header = fmt::format(R"({{"a":{{{},"data_offsets":[0,2]}}}})", u8);
  data = 8 + header.size();
  expect_refused(assemble(header, "abcd"),
                 {fmt::format("bytes {} to {} at the end of the file belong to no tensor", data + 2, data + 4)});
  std::string b = bytes_ + "junk";
  expect_refused(b,
                 {fmt::format("bytes {} to {} at the end of the file belong to no tensor", bytes_.size(), b.size())});
}

TEST_F(SafetensorsCorrupt, DuplicateNamesAndBadMetadata) {
  const std::string t = R"({"dtype":"U8","shape":[1],"data_offsets":[0,1]})";
  expect_refused(assemble(fmt::format(R"({{"a":{},"a":{}}})", t, t), "x"), {"the key 'a' appears twice"});
  expect_refused(assemble(fmt::format(R"({{"__metadata__":{{"k":"1","k":"2"}},"a":{}}})", t), "x"),
                 {"the key 'k' appears twice"});
  expect_refused(assemble(fmt::format(R"({{"__metadata__":{{"k":1}},"a":{}}})", t), "x"),
                 {"\"__metadata__\" must map strings to strings; the value of 'k' is a JSON number"});
  expect_refused(assemble(fmt::format(R"({{"__metadata__":"pt","a":{}}})", t), "x"),
                 {"\"__metadata__\" is a JSON string, not an object"});
  expect_refused(assemble(fmt::format(R"({{"__metadata__":{{"k":{{"x":"y"}}}},"a":{}}})", t), "x"),
                 {"the value of 'k' is a JSON object"});
}

}  // namespace
}  // namespace bellows::ckpt
