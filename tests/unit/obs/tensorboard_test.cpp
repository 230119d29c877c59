// TensorBoard event files: the TFRecord framing's masked CRC-32C against the published check value, every record
// of a written file framed and checksummed, and an unwritable run directory as a resource error.
#include "bellows/obs/tensorboard_sink.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>

#include "bellows/util/error.h"

namespace bellows::obs {
namespace {

std::uint64_t read_le(const std::string& bytes, std::size_t at, int n) {
  std::uint64_t v = 0;
  for (int i = n - 1; i >= 0; --i) v = (v << 8) | static_cast<unsigned char>(bytes[at + static_cast<std::size_t>(i)]);
  return v;
}

TEST(TensorBoard, MaskedCrc32cOfTheCheckString) {
  // CRC-32C("123456789") = 0xE3069283 (the standard check value); masked: rotate right 15, add 0xa282ead8.
  const std::uint32_t crc = 0xE3069283u;
  EXPECT_EQ(masked_crc32c("123456789"), ((crc >> 15) | (crc << 17)) + 0xa282ead8u);
  EXPECT_EQ(masked_crc32c(""), ((0u >> 15) | (0u << 17)) + 0xa282ead8u);
}

TEST(TensorBoard, EveryRecordIsFramedAndChecksummed) {
  const auto dir = std::filesystem::path(::testing::TempDir()) / ("tb_" + std::to_string(getpid()));
  std::filesystem::create_directories(dir);
  std::filesystem::path file;
  {
    TensorBoardSink sink(dir);
    file = sink.path();
    StepRecord r;
    r.step = 7;
    r.values = {{"loss", 0.5}};
    r.phase_ms = {{"data", 1.0}};
    sink.on_step(r);
    sink.on_eval(EvalRecord{7, 0, false, {{"loss", 0.25}}});
  }
  EXPECT_EQ(file.filename().string().rfind("events.out.tfevents.", 0), 0u);
  std::ifstream in(file, std::ios::binary);
  const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::size_t at = 0;
  int records = 0;
  while (at < bytes.size()) {
    ASSERT_LE(at + 12, bytes.size());
    const std::uint64_t length = read_le(bytes, at, 8);
    EXPECT_EQ(read_le(bytes, at + 8, 4), masked_crc32c(std::string_view(bytes).substr(at, 8)));
    ASSERT_LE(at + 12 + length + 4, bytes.size());
    EXPECT_EQ(read_le(bytes, at + 12 + length, 4), masked_crc32c(std::string_view(bytes).substr(at + 12, length)));
    at += 12 + length + 4;
    ++records;
  }
  EXPECT_EQ(records, 3);  // the file version, a training record, an evaluation
  EXPECT_NE(bytes.find("brain.Event:2"), std::string::npos);
  EXPECT_NE(bytes.find("train/loss"), std::string::npos);
  EXPECT_NE(bytes.find("time/data_ms"), std::string::npos);
  EXPECT_NE(bytes.find("eval/loss"), std::string::npos);
}

TEST(TensorBoard, AnUnwritableDirectoryIsAResourceError) {
  try {
    TensorBoardSink sink("/nonexistent-bellows-dir/run");
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kResource);
    EXPECT_NE(e.message().find("/nonexistent-bellows-dir/run"), std::string::npos) << e.message();
  }
}

}  // namespace
}  // namespace bellows::obs
