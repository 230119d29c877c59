// metrics.jsonl: one JSON object per logged step, evaluation and run end, flushed line by line, so a run
// that dies leaves every record written so far readable.
#pragma once

#include <cstdio>
#include <filesystem>

#include "bellows/obs/sink.h"  // defines: Sink

namespace bellows::obs {

class JsonlSink final : public Sink {
 public:
  explicit JsonlSink(const std::filesystem::path& path);  // kResource error when it cannot be created
  ~JsonlSink() override;
  JsonlSink(const JsonlSink&) = delete;
  JsonlSink& operator=(const JsonlSink&) = delete;

  void on_run_start(const RunStart& start) override;  // a "start" record with the plan and machine lines
  void on_step(const StepRecord& record) override;
  void on_eval(const EvalRecord& record) override;
  void on_message(const std::string& text) override;
  void on_checkpoint(const CheckpointRecord& record) override;
  void on_run_end(const RunEnd& end) override;

 private:
  void write_line(const std::string& line);
  std::filesystem::path path_;
  std::FILE* file_ = nullptr;
};

}  // namespace bellows::obs
