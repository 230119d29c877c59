// TensorBoard event files: every scalar of the run (the training records' values, samples/s, step time, learning
// rate and the step-time breakdown; the evaluations' metrics) as an events.out.tfevents.* file in the run
// directory, which `tensorboard --logdir runs/` shows. Tags: "train/<key>", "time/<phase>_ms", "eval/<key>", with
// the keys of metrics.jsonl. Records are appended and flushed one by one, so a live run can be watched.
#pragma once

#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <string>
#include <string_view>

#include "bellows/obs/sink.h"  // defines: Sink

namespace bellows::obs {

class TensorBoardSink final : public Sink {
 public:
  // Creates <dir>/events.out.tfevents.<unix seconds>.<host name>.<pid> (kResource error when it cannot).
  explicit TensorBoardSink(const std::filesystem::path& dir);
  ~TensorBoardSink() override;
  TensorBoardSink(const TensorBoardSink&) = delete;
  TensorBoardSink& operator=(const TensorBoardSink&) = delete;

  void on_step(const StepRecord& record) override;
  void on_eval(const EvalRecord& record) override;

  const std::filesystem::path& path() const { return path_; }

 private:
  void write_scalars(std::int64_t step, const Values& scalars);
  void write_record(const std::string& bytes);
  std::filesystem::path path_;
  std::FILE* file_ = nullptr;
};

// TFRecord's masked CRC-32C of `data` (exposed for tests): CRC-32C (Castagnoli), rotated right by 15 and
// offset by 0xa282ead8.
std::uint32_t masked_crc32c(std::string_view data);

}  // namespace bellows::obs
