// metrics.jsonl sink; see jsonl_sink.h.
#include "bellows/obs/jsonl_sink.h"
#include "bellows/obs/sink_registry.h"

#include <fmt/format.h>

#include <cerrno>
#include <cstring>
#include <nlohmann/json.hpp>

#include "bellows/util/check.h"

namespace bellows::obs {

JsonlSink::JsonlSink(const std::filesystem::path& path) : path_(path) {
  file_ = std::fopen(path.c_str(), "a");
  BELLOWS_CHECK_RESOURCE(file_ != nullptr, fmt::format("cannot open {} for writing: {}", path.string(), std::strerror(errno)),
                         "check that the run directory is writable and the disk is not full");
}

JsonlSink::~JsonlSink() {
  if (file_) std::fclose(file_);
}

void JsonlSink::write_line(const std::string& line) {
  const bool ok = std::fputs(line.c_str(), file_) >= 0 && std::fputc('\n', file_) != EOF && std::fflush(file_) == 0;
  BELLOWS_CHECK_RESOURCE(ok, fmt::format("writing {} failed: {}", path_.string(), std::strerror(errno)),
                         "check free disk space");
}

void JsonlSink::on_run_start(const RunStart& start) {
  nlohmann::json header = nlohmann::json::object();
  for (const auto& [k, v] : start.header) header[k] = v;
  write_line(nlohmann::json({{"type", "start"},
                             {"run", start.run_name},
                             {"dir", start.run_dir},
                             {"epochs", start.epochs},
                             {"batches_per_epoch", start.batches_per_epoch},
                             {"total_steps", start.total_steps},
                             {"header", header}})
                 .dump());
}

void JsonlSink::on_step(const StepRecord& r) {
  nlohmann::json j = {{"type", "train"},       {"step", r.step},
                      {"epoch", r.epoch},      {"batch", r.batch_in_epoch},
                      {"elapsed_s", r.elapsed_s}, {"samples_per_s", r.samples_per_s},
                      {"step_time_ms", r.step_time_ms}, {"lr", r.lr}};
  for (const auto& [k, v] : r.values) j[k] = v;
  double total = 0;
  for (const auto& [phase, ms] : r.phase_ms) total += ms;
  for (const auto& [phase, ms] : r.phase_ms) {
    j["time_" + phase + "_ms"] = ms;
    j["time_" + phase + "_frac"] = total > 0 ? ms / total : 0.0;
  }
  for (const auto& [phase, mb] : r.phase_mem_mb) j["mem_" + phase + "_peak_mb"] = mb;
  write_line(j.dump());
}

void JsonlSink::on_eval(const EvalRecord& r) {
  nlohmann::json j = {{"type", "eval"}, {"step", r.step}, {"epoch", r.epoch}, {"ema", r.ema}};
  for (const auto& [k, v] : r.values) j[k] = v;
  write_line(j.dump());
}

void JsonlSink::on_checkpoint(const CheckpointRecord& r) {
  nlohmann::json j = {{"type", "checkpoint"}, {"step", r.step}, {"path", r.path}, {"reason", r.reason}, {"layout", r.layout},
                      {"seconds", r.seconds}};
  for (const auto& [k, v] : r.values) j[k] = v;
  write_line(j.dump());
}

void JsonlSink::on_message(const std::string& text) { write_line(nlohmann::json({{"type", "message"}, {"text", text}}).dump()); }

void JsonlSink::on_run_end(const RunEnd& end) {
  nlohmann::json summary = nlohmann::json::object();
  for (const auto& [k, v] : end.summary) summary[k] = v;
  write_line(nlohmann::json({{"type", "end"}, {"interrupted", end.interrupted}, {"summary", summary}}).dump());
}

namespace {

// <run dir>/metrics.jsonl: every record, message and the run's end, one JSON object a line.
SinkEntry jsonl_sink_entry() {
  SinkEntry e;
  e.name = "jsonl";
  e.help = "every record, message and the run's end as JSON lines in <run dir>/metrics.jsonl";
  e.order = 1;
  e.make = [](const SinkContext& c) -> std::shared_ptr<Sink> { return std::make_shared<JsonlSink>(c.run_dir / "metrics.jsonl"); };
  return e;
}

const SinkRegistrar kJsonlSinkRegistered(jsonl_sink_entry());

}  // namespace

}  // namespace bellows::obs
