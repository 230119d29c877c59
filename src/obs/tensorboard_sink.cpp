// TensorBoard event files; see tensorboard_sink.h. The messages are protobuf (Debian's libprotobuf, from
// tensorboard/event.proto); the TFRecord framing around them and its CRC-32C are written here by hand: a few
// lines that no Debian library provides on their own.
#include "bellows/obs/tensorboard_sink.h"

#include <unistd.h>

#include <array>
#include <chrono>

#include "bellows/util/check.h"
#include "event.pb.h"

namespace bellows::obs {

namespace {

// CRC-32C, reflected polynomial 0x82F63B78, one table lookup per byte.
std::array<std::uint32_t, 256> crc32c_table() {
  std::array<std::uint32_t, 256> table{};
  for (std::uint32_t i = 0; i < 256; ++i) {
    std::uint32_t c = i;
    for (int k = 0; k < 8; ++k) c = (c & 1) ? (c >> 1) ^ 0x82F63B78u : c >> 1;
    table[i] = c;
  }
  return table;
}

std::uint32_t crc32c(std::string_view data) {
  static const std::array<std::uint32_t, 256> table = crc32c_table();
  std::uint32_t crc = 0xFFFFFFFFu;
  for (const unsigned char b : data) crc = table[(crc ^ b) & 0xFF] ^ (crc >> 8);
  return crc ^ 0xFFFFFFFFu;
}

double unix_seconds() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

std::string little_endian(std::uint64_t v, int bytes) {
  std::string out(static_cast<std::size_t>(bytes), '\0');
  for (int i = 0; i < bytes; ++i) out[static_cast<std::size_t>(i)] = static_cast<char>((v >> (8 * i)) & 0xFF);
  return out;
}

}  // namespace

std::uint32_t masked_crc32c(std::string_view data) {
  const std::uint32_t crc = crc32c(data);
  return ((crc >> 15) | (crc << 17)) + 0xa282ead8u;
}

TensorBoardSink::TensorBoardSink(const std::filesystem::path& dir) {
  std::array<char, 256> host{};
  if (gethostname(host.data(), host.size() - 1) != 0) host[0] = '\0';
  // (No fmt here: this file compiles without LibTorch's include directories, where bellows finds fmt.)
  path_ = dir / ("events.out.tfevents." + std::to_string(static_cast<std::int64_t>(unix_seconds())) + "." +
                 (host[0] ? std::string(host.data()) : std::string("localhost")) + "." + std::to_string(getpid()));
  file_ = std::fopen(path_.c_str(), "ab");
  BELLOWS_CHECK_RESOURCE(file_ != nullptr, "cannot create the TensorBoard event file " + path_.string(),
                         "check the run directory's permissions, or set log.tensorboard=false");
  tensorboard::Event version;
  version.set_wall_time(unix_seconds());
  version.set_file_version("brain.Event:2");
  write_record(version.SerializeAsString());
}

TensorBoardSink::~TensorBoardSink() {
  if (file_) std::fclose(file_);
}

void TensorBoardSink::write_record(const std::string& bytes) {
  // TFRecord: length (uint64 LE), masked CRC of the length (uint32 LE), the bytes, masked CRC of the bytes.
  const std::string length = little_endian(bytes.size(), 8);
  std::string record = length;
  record += little_endian(masked_crc32c(length), 4);
  record += bytes;
  record += little_endian(masked_crc32c(bytes), 4);
  const bool ok = std::fwrite(record.data(), 1, record.size(), file_) == record.size() && std::fflush(file_) == 0;
  BELLOWS_CHECK_RESOURCE(ok, "cannot write the TensorBoard event file " + path_.string(),
                         "check free disk space, or set log.tensorboard=false");
}

void TensorBoardSink::write_scalars(std::int64_t step, const Values& scalars) {
  tensorboard::Event event;
  event.set_wall_time(unix_seconds());
  event.set_step(step);
  tensorboard::Summary* summary = event.mutable_summary();
  for (const auto& [tag, value] : scalars) {
    tensorboard::Summary::Value* v = summary->add_value();
    v->set_tag(tag);
    v->set_simple_value(static_cast<float>(value));
  }
  write_record(event.SerializeAsString());
}

void TensorBoardSink::on_step(const StepRecord& r) {
  Values scalars{{"train/samples_per_s", r.samples_per_s}, {"train/step_time_ms", r.step_time_ms}, {"train/lr", r.lr}};
  for (const auto& [key, value] : r.values) scalars.emplace_back("train/" + key, value);
  for (const auto& [phase, ms] : r.phase_ms) scalars.emplace_back("time/" + phase + "_ms", ms);
  write_scalars(r.step, scalars);
}

void TensorBoardSink::on_eval(const EvalRecord& r) {
  Values scalars;
  for (const auto& [key, value] : r.values) scalars.emplace_back("eval/" + key, value);
  write_scalars(r.step, scalars);
}

}  // namespace bellows::obs
