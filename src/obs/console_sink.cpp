// Console sink; see console_sink.h.
#include "bellows/obs/console_sink.h"
#include "bellows/obs/sink_registry.h"

#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <string_view>

namespace bellows::obs {
namespace {

std::string duration(double seconds) {
  if (!std::isfinite(seconds) || seconds < 0) return "--:--";
  const auto s = static_cast<long>(seconds + 0.5);
  if (s >= 3600) return fmt::format("{}:{:02}:{:02}", s / 3600, (s / 60) % 60, s % 60);
  return fmt::format("{:02}:{:02}", s / 60, s % 60);
}

std::string value_text(double v) {
  if (v == 0) return "0";
  const double a = std::fabs(v);
  if (a >= 1e5 || a < 1e-3) return fmt::format("{:.3e}", v);
  return fmt::format("{:.4f}", v);
}

std::string values_text(const Values& values) {
  std::string out;
  for (const auto& [k, v] : values) out += fmt::format(" {} {}", k, value_text(v));
  return out;
}

// " loss 0.6931 accuracy 0.5000": the loss and the task's metrics.
std::string task_text(const StepRecord& r) {
  return values_text(Values(r.values.begin(), r.values.begin() + static_cast<std::ptrdiff_t>(std::min(r.task_values, r.values.size()))));
}

const double* find_value(const Values& values, std::string_view key) {
  for (const auto& [k, v] : values) {
    if (k == key) return &v;
  }
  return nullptr;
}

// What a plain line adds to the task's numbers: the gradient norm and one memory number, the window's peak of
// tensor memory (the process's resident peak where tensor memory is not counted). The memory breakdown by category,
// phase and rank, the phases, FLOP/s, MFU and the throughput in the data's units (tokens_per_s, pixels_per_s: beside
// samples/s) stay in metrics.jsonl and TensorBoard: on the console they made a line of about 450 characters.
std::string plain_extras(const StepRecord& r) {
  std::string out;
  if (const double* norm = find_value(r.values, "grad_norm")) out += fmt::format(" grad_norm {}", value_text(*norm));
  if (const double* peak = find_value(r.values, "mem_peak_mb")) {
    out += fmt::format(" mem_peak_mb {:.1f}", *peak);
  } else if (const double* rss = find_value(r.values, "rss_peak_mb")) {
    out += fmt::format(" rss_peak_mb {:.1f}", *rss);
  }
  return out;
}

}  // namespace

std::string format_table(const std::vector<std::pair<std::string, std::string>>& rows, int indent) {
  std::size_t width = 0;
  for (const auto& [k, v] : rows) width = std::max(width, k.size());
  std::string out;
  for (const auto& [k, v] : rows) out += fmt::format("{:{}}{:<{}}  {}\n", "", indent, k, width, v);
  return out;
}

ConsoleSink::ConsoleSink(std::FILE* out, int tty, bool sessions_only)
    : out_(out), tty_(tty < 0 ? isatty(fileno(out)) != 0 : tty != 0), sessions_only_(sessions_only) {}

void ConsoleSink::on_run_start(const RunStart& start) {
  epochs_ = start.epochs;
  if (sessions_only_) {  // the header once (the first session's), then each session's own line (a message)
    if (!start.header.empty()) {
      fmt::print(out_, "bellows online: run '{}' -> {}\n{}", start.run_name, start.run_dir, format_table(start.header));
      std::fflush(out_);
    }
    return;
  }
  fmt::print(out_, "bellows train: run '{}' -> {}\n", start.run_name, start.run_dir);
  fmt::print(out_, "{}", format_table(start.header));
  fmt::print(out_, "  {} epoch(s) x {} batches, {} optimizer steps\n", start.epochs, start.batches_per_epoch, start.total_steps);
  std::fflush(out_);
}

void ConsoleSink::on_step(const StepRecord& r) {
  if (sessions_only_) return;
  if (tty_) {
    constexpr int kWidth = 24;
    const double frac = r.batches_per_epoch > 0 ? static_cast<double>(r.batch_in_epoch) / r.batches_per_epoch : 0.0;
    const int filled = static_cast<int>(frac * kWidth);
    const double eta = frac > 0 ? r.epoch_elapsed_s * (1 - frac) / frac : -1;
    fmt::print(out_, "\r\x1b[2Kepoch {}/{} [{:=<{}}{:<{}}] {}/{}{} {:.0f} samples/s ETA {}", r.epoch + 1, epochs_, "", filled, "",
               kWidth - filled, r.batch_in_epoch, r.batches_per_epoch, task_text(r), r.samples_per_s, duration(eta));
    bar_open_ = true;
  } else {
    fmt::print(out_, "epoch {}/{} batch {}/{} step {}{} lr {} {:.1f} samples/s {:.1f} ms/step{}\n", r.epoch + 1, epochs_,
               r.batch_in_epoch, r.batches_per_epoch, r.step, task_text(r), value_text(r.lr), r.samples_per_s, r.step_time_ms,
               plain_extras(r));
  }
  std::fflush(out_);
}

void ConsoleSink::finish_bar() {
  if (bar_open_) fmt::print(out_, "\n");
  bar_open_ = false;
}

void ConsoleSink::on_epoch_end(std::int64_t epoch, const StepRecord& last) {
  if (sessions_only_) return;
  finish_bar();
  fmt::print(out_, "epoch {}/{} done in {}:{}\n", epoch + 1, epochs_, duration(last.epoch_elapsed_s), task_text(last));
  std::fflush(out_);
}

void ConsoleSink::on_eval(const EvalRecord& r) {
  if (sessions_only_) return;
  finish_bar();
  fmt::print(out_, "eval{} at step {}:{}\n", r.ema ? " (EMA weights)" : "", r.step, values_text(r.values));
  std::fflush(out_);
}

void ConsoleSink::on_message(const std::string& text) {
  finish_bar();
  fmt::print(out_, "{}\n", text);
  std::fflush(out_);
}

void ConsoleSink::on_run_end(const RunEnd& end) {
  if (sessions_only_) return;
  finish_bar();
  fmt::print(out_, "{}\n{}", end.interrupted ? "run interrupted; summary so far" : "run finished; summary",
             format_table(end.summary));
  std::fflush(out_);
}

namespace {

// The console sink of every run that has a terminal stream (`bellows train`: stdout; online training: online.console).
SinkEntry console_sink_entry() {
  SinkEntry e;
  e.name = "console";
  e.help = "the progress bar (a terminal) or plain lines, and the summary table";
  e.order = 0;
  e.make = [](const SinkContext& c) -> std::shared_ptr<Sink> {
    return c.console != nullptr ? std::make_shared<ConsoleSink>(c.console, c.tty, c.console_sessions_only) : nullptr;
  };
  return e;
}

const SinkRegistrar kConsoleSinkRegistered(console_sink_entry());

}  // namespace

}  // namespace bellows::obs
